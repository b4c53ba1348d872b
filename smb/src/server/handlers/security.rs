//! Security descriptors on the wire and at open time: the session's [`Token`], the
//! [`OpenGate`] through which the storage layer asks for access decisions during a CREATE,
//! and QUERY_INFO/SET_INFO with InfoType SECURITY (MS-SMB2 3.3.5.20.3, 3.3.5.21.3).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::proto::io::{encode_buffer_response, encode_error_response_with_data};
use crate::proto::status;
use crate::security::descriptor::{control, secinfo};
use crate::security::{
    default_descriptor, descriptor_for_new, granted_rights, may_assign_owner, SecurityDescriptor,
    Sid, Token,
};
use crate::share_mode::access::rights;
use crate::vfs::{CreateSecurity, ExistingFile, FsError};

use super::{blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};

/// RID of the group every appliance user belongs to (as "Domain Users" on Windows).
const USERS_GROUP_RID: u32 = 513;
/// RID of the guest account.
const GUEST_RID: u32 = 501;
/// STATUS_INVALID_OWNER.
pub const INVALID_OWNER: u32 = 0xC000_005A;
/// STATUS_INVALID_SECURITY_DESCR.
pub const INVALID_SECURITY_DESCR: u32 = 0xC000_0079;
/// STATUS_PRIVILEGE_NOT_HELD.
const PRIVILEGE_NOT_HELD: u32 = 0xC000_0061;

/// The token of a session: the user's SID is the machine SID plus the user's RID (from the
/// appliance's user table), its groups Everyone, Authenticated Users, BUILTIN\Users and the
/// machine's users group; a guest or anonymous session holds Everyone, Guests and the
/// guest or anonymous SID.
pub fn session_token(machine: &Sid, rid: Option<u32>, guest: bool) -> Token {
    match rid {
        Some(rid) if !guest => Token {
            user: machine.with_rid(rid),
            primary_group: machine.with_rid(USERS_GROUP_RID),
            groups: vec![
                Sid::world(),
                Sid::authenticated_users(),
                Sid::builtin_users(),
            ],
        },
        _ => Token {
            user: if rid.is_some() {
                machine.with_rid(GUEST_RID)
            } else {
                Sid::anonymous()
            },
            primary_group: Sid::builtin_guests(),
            groups: vec![Sid::world()],
        },
    }
}

/// Decodes stored descriptor bytes; a file without one (or with bytes that no longer
/// decode, which is logged) has the [`default_descriptor`].
fn stored_or_default(bytes: Option<&[u8]>, is_dir: bool) -> SecurityDescriptor {
    match bytes.map(SecurityDescriptor::decode) {
        Some(Ok(sd)) => sd,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "stored security descriptor unreadable; using the default");
            default_descriptor(is_dir)
        }
        None => default_descriptor(is_dir),
    }
}

/// One CREATE's access decision, made when the storage layer has found (or is about to
/// make) the file: for an existing file the descriptor's rights (DELETE also through the
/// parent's FILE_DELETE_CHILD), for a new one the parent's FILE_ADD_FILE or
/// FILE_ADD_SUBDIRECTORY. The creator of a new file gets what it asked for.
#[derive(Debug)]
pub struct OpenGate {
    token: Arc<Token>,
    /// Specific rights asked for (generic bits mapped, MAXIMUM_ALLOWED removed).
    desired: u32,
    /// Whether MAXIMUM_ALLOWED was asked.
    maximum: bool,
    /// The most the share allows (read-only shares leave out the writing rights).
    share_maximal: u32,
    /// The descriptor the client supplied (`SecD` create context).
    supplied: Option<SecurityDescriptor>,
    /// Whether the disposition overwrites an existing file, which needs FILE_WRITE_DATA
    /// whatever the open asks for (as Samba checks).
    truncates: bool,
    /// What the decision granted (set by either callback).
    granted: AtomicU32,
    /// The most the caller could have been granted (the MxAc answer).
    maximal: AtomicU32,
}

/// Rights the descriptor check leaves to other rules: SACL access is a privilege the
/// appliance does not hand out, so the server never checks it against a DACL.
const NOT_FROM_DACL: u32 = rights::ACCESS_SYSTEM_SECURITY;

impl OpenGate {
    /// A gate for a CREATE asking `desired` (generic bits already mapped) by `token`.
    pub fn new(
        token: Arc<Token>,
        desired: u32,
        maximum: bool,
        share_maximal: u32,
        supplied: Option<SecurityDescriptor>,
        truncates: bool,
    ) -> OpenGate {
        OpenGate {
            token,
            desired,
            maximum,
            share_maximal,
            supplied,
            truncates,
            granted: AtomicU32::new(desired),
            maximal: AtomicU32::new(share_maximal),
        }
    }

    /// The rights granted to the open.
    pub fn granted(&self) -> u32 {
        self.granted.load(Ordering::Relaxed)
    }

    /// The maximal access of the caller on the file (MxAc).
    pub fn maximal(&self) -> u32 {
        self.maximal.load(Ordering::Relaxed)
    }
}

impl CreateSecurity for OpenGate {
    fn check_existing(&self, file: &ExistingFile<'_>) -> Result<(), FsError> {
        let sd = stored_or_default(file.descriptor, file.is_dir);
        let mut allowed = granted_rights(&sd, &self.token);
        // MS-FSA 2.1.5.1.2.1: the parent's FILE_DELETE_CHILD grants DELETE and its
        // FILE_LIST_DIRECTORY grants FILE_READ_ATTRIBUTES.
        let from_parent = rights::DELETE | rights::FILE_READ_ATTRIBUTES;
        if allowed & from_parent != from_parent {
            if let Some(parent) = file.parent {
                let parent_sd = stored_or_default(parent()?.as_deref(), true);
                let on_parent = granted_rights(&parent_sd, &self.token);
                if on_parent & rights::FILE_DELETE_CHILD != 0 {
                    allowed |= rights::DELETE;
                }
                if on_parent & rights::FILE_READ_DATA != 0 {
                    allowed |= rights::FILE_READ_ATTRIBUTES; // FILE_LIST_DIRECTORY
                }
            }
        }
        let maximal = allowed & self.share_maximal;
        self.maximal.store(maximal, Ordering::Relaxed);
        let mut needed = self.desired & !NOT_FROM_DACL;
        if self.truncates {
            needed |= rights::FILE_WRITE_DATA;
        }
        if needed & !allowed != 0 {
            return Err(FsError::AccessDenied(format!(
                "the descriptor grants {allowed:#x}, the open asks {needed:#x}"
            )));
        }
        let granted = if self.maximum {
            maximal | self.desired
        } else {
            self.desired
        };
        self.granted.store(granted, Ordering::Relaxed);
        Ok(())
    }

    fn descriptor_for_new(&self, parent: Option<&[u8]>, is_dir: bool) -> Result<Vec<u8>, FsError> {
        let parent_sd = stored_or_default(parent, true);
        let need = if is_dir {
            rights::FILE_APPEND_DATA // FILE_ADD_SUBDIRECTORY
        } else {
            rights::FILE_WRITE_DATA // FILE_ADD_FILE
        };
        if granted_rights(&parent_sd, &self.token) & need == 0 {
            return Err(FsError::AccessDenied(
                "the directory does not let this user add entries".into(),
            ));
        }
        let new = descriptor_for_new(&parent_sd, self.supplied.as_ref(), &self.token, is_dir);
        self.maximal.store(self.share_maximal, Ordering::Relaxed);
        let granted = if self.maximum {
            self.share_maximal | self.desired
        } else {
            self.desired
        };
        self.granted.store(granted, Ordering::Relaxed);
        Ok(new.encode(secinfo::OWNER | secinfo::GROUP | secinfo::DACL | secinfo::SACL))
    }
}

/// Decodes the descriptor of a `SecD` create context or a SET_INFO, refusing owners the
/// caller may not assign, and [`canonicalize`]s it.
pub fn decode_supplied(bytes: &[u8], token: &Token, info: u32) -> Result<SecurityDescriptor, u32> {
    let mut sd = SecurityDescriptor::decode(bytes).map_err(|_| INVALID_SECURITY_DESCR)?;
    canonicalize(&mut sd);
    if info & secinfo::OWNER != 0 {
        if let Some(owner) = &sd.owner {
            if !may_assign_owner(token, owner) {
                return Err(INVALID_OWNER);
            }
        }
    }
    Ok(sd)
}

/// What a descriptor a client sets is stored as (Samba's rules, which Windows clients
/// see from Windows too): generic bits of every ACE mapped to file rights, and
/// SE_DACL_AUTO_INHERITED kept only when the client also set SE_DACL_AUTO_INHERIT_REQ.
pub fn canonicalize(sd: &mut SecurityDescriptor) {
    for acl in [sd.dacl.as_mut(), sd.sacl.as_mut()].into_iter().flatten() {
        for ace in &mut acl.aces {
            if let crate::security::descriptor::AceBody::Basic { mask, .. } = &mut ace.body {
                *mask = crate::security::check::map_generic_bits(*mask);
            }
        }
    }
    let both = control::DACL_AUTO_INHERITED | control::DACL_AUTO_INHERIT_REQ;
    let keep = sd.control & both == both;
    sd.control &= !both;
    if keep {
        sd.control |= control::DACL_AUTO_INHERITED;
    }
}

/// The rights a query (`write == false`) or a set of the descriptor parts `info` needs.
fn rights_for(info: u32, write: bool) -> u32 {
    let mut need = 0;
    if info & (secinfo::OWNER | secinfo::GROUP) != 0 {
        need |= if write {
            rights::WRITE_OWNER
        } else {
            rights::READ_CONTROL
        };
    }
    if info & secinfo::DACL != 0 {
        need |= if write {
            rights::WRITE_DAC
        } else {
            rights::READ_CONTROL
        };
    }
    if info & secinfo::SACL != 0 {
        need |= rights::ACCESS_SYSTEM_SECURITY;
    }
    need
}

/// Refuses a query or set of `info` through a handle granted `access`.
fn check_handle(access: u32, info: u32, write: bool) -> Result<(), u32> {
    let need = rights_for(info, write);
    if need & rights::ACCESS_SYSTEM_SECURITY != 0 && access & rights::ACCESS_SYSTEM_SECURITY == 0 {
        return Err(PRIVILEGE_NOT_HELD);
    }
    if need & !access != 0 {
        return Err(status::ACCESS_DENIED);
    }
    Ok(())
}

/// QUERY_INFO, InfoType SECURITY: the parts `additional_information` selects; a buffer too
/// small gets BUFFER_TOO_SMALL with the size needed (MS-SMB2 3.3.5.20.3).
pub async fn query(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    file_id: crate::proto::FileId,
    info: u32,
    output_len: u32,
) -> HResult {
    let open = super::open(conn, ctx, file_id)?;
    check_handle(open.access, info, false)?;
    let is_dir = open.is_dir;
    let f = file_of(open)?;
    let stored = blocking(move || f.security_descriptor()).await?;
    let sd = stored_or_default(stored.as_deref(), is_dir);
    let bytes = sd.encode(info);
    if bytes.len() > usize::try_from(output_len).unwrap_or(usize::MAX) {
        let need = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let mut body = Vec::with_capacity(16);
        encode_error_response_with_data(&mut body, &need.to_le_bytes());
        return Ok(Reply::with_status(status::BUFFER_TOO_SMALL, body));
    }
    let mut body = Vec::with_capacity(bytes.len() + 8);
    encode_buffer_response(&mut body, &bytes);
    Ok(Reply::ok(body))
}

/// SET_INFO, InfoType SECURITY: replaces the parts `info` selects (MS-SMB2 3.3.5.21.3).
pub async fn set(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    file_id: crate::proto::FileId,
    info: u32,
    buffer: &[u8],
) -> HResult {
    let token = super::session(conn, ctx)?.token();
    let open = super::open(conn, ctx, file_id)?;
    check_handle(open.access, info, true)?;
    let new = decode_supplied(buffer, &token, info)?;
    let is_dir = open.is_dir;
    let f = file_of(open)?;
    blocking(move || {
        let mut sd = stored_or_default(f.security_descriptor()?.as_deref(), is_dir);
        sd.merge(&new, info);
        sd.control &= !control::SELF_RELATIVE;
        f.set_security_descriptor(
            &sd.encode(secinfo::OWNER | secinfo::GROUP | secinfo::DACL | secinfo::SACL),
        )
    })
    .await?;
    let mut body = Vec::with_capacity(2);
    crate::proto::info::encode_set_info_response(&mut body);
    Ok(Reply::ok(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::descriptor::{ace_flags, ace_type};
    use crate::security::{Ace, Acl};

    fn token() -> Arc<Token> {
        Arc::new(session_token(
            &Sid::new(5, &[21, 7, 8, 9]),
            Some(1001),
            false,
        ))
    }

    fn no_parent() -> Result<Option<Vec<u8>>, FsError> {
        Ok(None)
    }

    #[test]
    fn guests_and_users_get_distinct_tokens() {
        let machine = Sid::new(5, &[21, 7, 8, 9]);
        let user = session_token(&machine, Some(1001), false);
        assert_eq!(user.user.to_string(), "S-1-5-21-7-8-9-1001");
        assert!(user.has(&Sid::authenticated_users()));
        let guest = session_token(&machine, Some(1001), true);
        assert_eq!(guest.user.to_string(), "S-1-5-21-7-8-9-501");
        assert!(!guest.has(&Sid::authenticated_users()) && guest.has(&Sid::world()));
        assert_eq!(session_token(&machine, None, true).user, Sid::anonymous());
    }

    #[test]
    fn delete_comes_from_the_file_or_the_parents_delete_child() {
        let t = token();
        let sd = SecurityDescriptor {
            control: control::DACL_PRESENT,
            owner: Some(t.user.clone()),
            group: None,
            dacl: Some(Acl::new(vec![Ace::basic(
                ace_type::ACCESS_ALLOWED,
                0,
                rights::FILE_GENERIC_READ,
                t.user.clone(),
            )])),
            sacl: None,
        };
        let bytes = sd.encode(0xF);
        let gate = OpenGate::new(
            t.clone(),
            rights::DELETE,
            false,
            rights::FILE_ALL_ACCESS,
            None,
            false,
        );
        let file = ExistingFile {
            descriptor: Some(&bytes),
            is_dir: false,
            parent: Some(&no_parent),
        };
        assert!(
            gate.check_existing(&file).is_ok(),
            "the default parent grants DELETE_CHILD"
        );
        let strict_parent = SecurityDescriptor {
            dacl: Some(Acl::new(vec![])),
            ..sd.clone()
        }
        .encode(0xF);
        let parent = || Ok(Some(strict_parent.clone()));
        let file = ExistingFile {
            descriptor: Some(&bytes),
            is_dir: false,
            parent: Some(&parent),
        };
        assert!(matches!(
            gate.check_existing(&file),
            Err(FsError::AccessDenied(_))
        ));
        let max = OpenGate::new(t, 0, true, rights::FILE_ALL_ACCESS, None, false);
        max.check_existing(&file)
            .expect("MAXIMUM_ALLOWED always opens");
        assert_eq!(
            max.granted(),
            rights::FILE_GENERIC_READ | rights::WRITE_DAC,
            "read plus the owner's implicit rights"
        );
    }

    #[test]
    fn new_files_need_add_file_on_the_parent_and_inherit_from_it() {
        let t = token();
        let parent = SecurityDescriptor {
            control: control::DACL_PRESENT,
            owner: Some(Sid::builtin_administrators()),
            group: None,
            dacl: Some(Acl::new(vec![Ace::basic(
                ace_type::ACCESS_ALLOWED,
                ace_flags::OBJECT_INHERIT,
                rights::FILE_GENERIC_READ | rights::FILE_APPEND_DATA,
                Sid::world(),
            )])),
            sacl: None,
        }
        .encode(0xF);
        let gate = OpenGate::new(
            t.clone(),
            rights::FILE_ALL_ACCESS,
            false,
            rights::FILE_ALL_ACCESS,
            None,
            false,
        );
        assert!(
            gate.descriptor_for_new(Some(&parent), false).is_err(),
            "no FILE_ADD_FILE"
        );
        let made = gate
            .descriptor_for_new(Some(&parent), true)
            .expect("ADD_SUBDIRECTORY held");
        let sd = SecurityDescriptor::decode(&made).expect("decodes");
        assert_eq!(sd.owner.as_ref(), Some(&t.user));
        assert_eq!(
            gate.granted(),
            rights::FILE_ALL_ACCESS,
            "the creator gets what it asked"
        );
    }

    #[test]
    fn handles_need_read_control_to_query_and_write_dac_to_set() {
        assert_eq!(
            check_handle(rights::FILE_READ_ATTRIBUTES, secinfo::DACL, false),
            Err(status::ACCESS_DENIED)
        );
        assert_eq!(
            check_handle(rights::READ_CONTROL, secinfo::OWNER | secinfo::DACL, false),
            Ok(())
        );
        assert_eq!(
            check_handle(rights::WRITE_DAC, secinfo::OWNER, true),
            Err(status::ACCESS_DENIED)
        );
        assert_eq!(
            check_handle(rights::FILE_ALL_ACCESS, secinfo::SACL, false),
            Err(PRIVILEGE_NOT_HELD)
        );
        assert_eq!(
            check_handle(0, 0, false),
            Ok(()),
            "nothing asked, nothing needed"
        );
    }
}
