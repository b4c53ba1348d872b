//! Share-mode (sharing violation) rules between opens of one file, and byte-range locks. Pure logic.
