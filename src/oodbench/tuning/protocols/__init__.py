"""The built-in tuning protocols, one file each, registered into
:data:`oodbench.tuning.protocol.PROTOCOLS` when the registry is first read (it imports every
module of this package; importing the package itself loads none of them)."""
