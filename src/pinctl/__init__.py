"""pinctl: see and set which images the kubelet image GC keeps."""

__version__ = "0.1.0"
