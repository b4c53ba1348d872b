//! The storage boundary: the only way the SMB server reaches files. The appliance implements it.
