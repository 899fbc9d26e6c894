"""Where pull and import put images, below both: the runtime an image lands in (the CRI runtime,
namespace k8s.io, or Docker's API, namespace moby) and the disk budget both keep on its image
filesystem. Neither pull nor import imports the other."""
