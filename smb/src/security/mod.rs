//! Windows security for files: SIDs, self-relative security descriptors, the access
//! check and inheritance. Pure functions over bytes and values: the server decides with
//! them, the storage layer only keeps the descriptor bytes of each file.

pub mod check;
pub mod descriptor;
pub mod sid;

pub use check::{default_descriptor, descriptor_for_new, granted_rights, may_assign_owner, Token};
pub use descriptor::{secinfo, Ace, Acl, DescriptorError, SecurityDescriptor};
pub use sid::Sid;
