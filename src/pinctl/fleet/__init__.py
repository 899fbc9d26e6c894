"""pinctl on a fleet: the Node condition each agent writes, and fleet status, which reads them."""
