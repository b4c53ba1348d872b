//! SMB2/3 wire codec (sans-I/O): headers, transform header, every command request/response. MS-SMB2 section 2.
