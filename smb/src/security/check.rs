//! The access check (MS-DTYP 2.5.3.2, reduced to what a file server evaluates) and the
//! descriptor a new file or directory inherits from its parent (MS-DTYP 2.5.3.4).

use super::descriptor::{ace_flags, ace_type, control, Ace, AceBody, Acl, SecurityDescriptor};
use super::sid::Sid;
use crate::share_mode::access::{map_generic, rights};

/// Who is asking: the user's SID and the groups it belongs to. Built once per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The user (owner of what the user creates).
    pub user: Sid,
    /// The primary group (group of what the user creates).
    pub primary_group: Sid,
    /// Every group SID of the user, Everyone included.
    pub groups: Vec<Sid>,
}

impl Token {
    /// Whether `sid` is the user or one of its groups.
    pub fn has(&self, sid: &Sid) -> bool {
        self.user == *sid || self.primary_group == *sid || self.groups.iter().any(|g| g == sid)
    }
}

/// Every specific right a file or directory has.
pub const ALL_FILE_RIGHTS: u32 = rights::FILE_ALL_ACCESS;

/// A mask with its GENERIC_* bits replaced by the file rights they stand for, any other
/// bit (MAXIMUM_ALLOWED, ACCESS_SYSTEM_SECURITY) left as it is.
pub fn map_generic_bits(mask: u32) -> u32 {
    map_generic(mask & !rights::MAXIMUM_ALLOWED) | (mask & rights::MAXIMUM_ALLOWED)
}

/// An ACE mask with its generic bits mapped to file rights (MAXIMUM_ALLOWED means nothing
/// in an ACE and is dropped).
fn ace_rights(mask: u32) -> u32 {
    map_generic(mask & !rights::MAXIMUM_ALLOWED)
}

/// The rights `token` holds on an object protected by `sd` (MS-DTYP 2.5.3.2 without
/// privileges, object ACEs or conditional ACEs): a NULL DACL grants everything; otherwise
/// the owner implicitly holds READ_CONTROL and WRITE_DAC (unless an OWNER RIGHTS ACE says
/// otherwise) and each effective ACE naming one of the token's SIDs allows or denies the
/// bits not already decided by an earlier ACE.
pub fn granted_rights(sd: &SecurityDescriptor, token: &Token) -> u32 {
    let Some(dacl) = sd.dacl.as_ref().filter(|_| sd.dacl_present()) else {
        return ALL_FILE_RIGHTS;
    };
    let mut allowed = 0u32;
    let mut denied = 0u32;
    let owner_rights = Sid::owner_rights();
    let has_owner_rights_ace = dacl
        .aces
        .iter()
        .any(|a| a.mask_and_sid().is_some_and(|(_, s)| *s == owner_rights));
    if !has_owner_rights_ace && sd.owner.as_ref().is_some_and(|o| token.has(o)) {
        allowed |= rights::READ_CONTROL | rights::WRITE_DAC;
    }
    let is_owner = sd.owner.as_ref().is_some_and(|o| token.has(o));
    for ace in &dacl.aces {
        if ace.flags & ace_flags::INHERIT_ONLY != 0 {
            continue;
        }
        let Some((mask, sid)) = ace.mask_and_sid() else {
            continue;
        };
        let applies = token.has(sid) || (*sid == owner_rights && is_owner);
        if !applies {
            continue;
        }
        let mask = ace_rights(mask) & ALL_FILE_RIGHTS;
        match ace.ace_type {
            ace_type::ACCESS_ALLOWED => allowed |= mask & !denied,
            ace_type::ACCESS_DENIED => denied |= mask & !allowed,
            _ => {}
        }
    }
    allowed
}

/// The descriptor of files no client gave one (created before descriptors were kept, or
/// outside SMB): owned by BUILTIN\Administrators, full control for Everyone, inherited by
/// what is created inside a directory. Access is then governed by the share's user list
/// and read-only flag alone, as before.
pub fn default_descriptor(is_dir: bool) -> SecurityDescriptor {
    let flags = if is_dir {
        ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT
    } else {
        0
    };
    SecurityDescriptor {
        control: control::DACL_PRESENT | control::DACL_AUTO_INHERITED,
        owner: Some(Sid::builtin_administrators()),
        group: Some(Sid::builtin_users()),
        dacl: Some(Acl::new(vec![Ace::basic(
            ace_type::ACCESS_ALLOWED,
            flags,
            ALL_FILE_RIGHTS,
            Sid::world(),
        )])),
        sacl: None,
    }
}

/// The ACEs a new object inherits from its parent's DACL (MS-DTYP 2.5.3.4.2
/// ComputeInheritedACLfromParent): files take object-inherit ACEs as effective ACEs;
/// directories take container-inherit ACEs (effective, and still inheritable unless
/// no-propagate) and object-inherit ones as inherit-only. CREATOR OWNER/GROUP and generic
/// masks are resolved in the effective copy, with an inherit-only original kept for the
/// next level.
fn inherited_aces(parent: &Acl, is_dir: bool, owner: &Sid, group: &Sid, inherited: u8) -> Vec<Ace> {
    let mut out = Vec::new();
    for ace in &parent.aces {
        let oi = ace.flags & ace_flags::OBJECT_INHERIT != 0;
        let ci = ace.flags & ace_flags::CONTAINER_INHERIT != 0;
        let np = ace.flags & ace_flags::NO_PROPAGATE_INHERIT != 0;
        let keep = (ace.flags & !ace_flags::INHERITANCE & !ace_flags::INHERITED) | inherited;
        if !is_dir {
            if oi {
                out.push(effective(ace, keep, owner, group));
            }
            continue;
        }
        if ci {
            let needs_split = match &ace.body {
                AceBody::Basic { mask, sid } => {
                    *sid == Sid::creator_owner()
                        || *sid == Sid::creator_group()
                        || ace_rights(*mask) != *mask
                }
                AceBody::Opaque(_) => false,
            };
            if np {
                out.push(effective(ace, keep, owner, group));
            } else if needs_split {
                out.push(effective(ace, keep, owner, group));
                out.push(Ace {
                    flags: (ace.flags & ace_flags::INHERITANCE) | ace_flags::INHERIT_ONLY | keep,
                    ..ace.clone()
                });
            } else {
                out.push(Ace {
                    flags: (ace.flags & (ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT))
                        | keep,
                    ..ace.clone()
                });
            }
        } else if oi && !np {
            out.push(Ace {
                flags: ace_flags::OBJECT_INHERIT | ace_flags::INHERIT_ONLY | keep,
                ..ace.clone()
            });
        }
    }
    out
}

/// The effective (evaluated) copy of an inheritable ACE.
fn effective(ace: &Ace, keep: u8, owner: &Sid, group: &Sid) -> Ace {
    let body = match &ace.body {
        AceBody::Basic { mask, sid } => {
            let sid = if *sid == Sid::creator_owner() {
                owner.clone()
            } else if *sid == Sid::creator_group() {
                group.clone()
            } else {
                sid.clone()
            };
            AceBody::Basic {
                mask: ace_rights(*mask),
                sid,
            }
        }
        other => other.clone(),
    };
    Ace {
        ace_type: ace.ace_type,
        flags: keep,
        body,
    }
}

/// The descriptor of an object `token` creates under a parent protected by `parent`,
/// given the descriptor the client supplied, if any (MS-DTYP 2.5.3.4.1, as Samba applies
/// it): owner and group from the supplied descriptor or the creator; the supplied DACL
/// when it has one (a NULL DACL included), else the parent's inheritable ACEs, else a
/// DACL giving the owner and SYSTEM full control.
pub fn descriptor_for_new(
    parent: &SecurityDescriptor,
    supplied: Option<&SecurityDescriptor>,
    token: &Token,
    is_dir: bool,
) -> SecurityDescriptor {
    let owner = supplied
        .and_then(|s| s.owner.clone())
        .unwrap_or_else(|| token.user.clone());
    let group = supplied
        .and_then(|s| s.group.clone())
        .unwrap_or_else(|| token.primary_group.clone());
    if let Some(s) = supplied.filter(|s| s.dacl_present()) {
        return SecurityDescriptor {
            control: s.control & !control::SELF_RELATIVE,
            owner: Some(owner),
            group: Some(group),
            dacl: s.dacl.clone(),
            sacl: s.sacl.clone(),
        };
    }
    // As Samba does: inherited ACEs are marked so (and the DACL auto-inherited) only
    // below a parent whose DACL is auto-inherited itself.
    let auto = parent.control & control::DACL_AUTO_INHERITED != 0;
    let marker = if auto { ace_flags::INHERITED } else { 0 };
    let inherited = parent
        .dacl
        .as_ref()
        .map(|d| inherited_aces(d, is_dir, &owner, &group, marker))
        .unwrap_or_default();
    let (control, aces) = if inherited.is_empty() {
        (
            control::DACL_PRESENT,
            vec![
                Ace::basic(ace_type::ACCESS_ALLOWED, 0, ALL_FILE_RIGHTS, owner.clone()),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    0,
                    ALL_FILE_RIGHTS,
                    Sid::local_system(),
                ),
            ],
        )
    } else {
        let flag = if auto {
            control::DACL_AUTO_INHERITED
        } else {
            0
        };
        (control::DACL_PRESENT | flag, inherited)
    };
    SecurityDescriptor {
        control,
        owner: Some(owner),
        group: Some(group),
        dacl: Some(Acl::new(aces)),
        sacl: supplied.and_then(|s| s.sacl.clone()),
    }
}

/// Whether `token` may make `sid` the owner of an object: only SIDs of its own token (no
/// take-ownership or restore privileges exist on the appliance).
pub fn may_assign_owner(token: &Token, sid: &Sid) -> bool {
    token.has(sid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> Token {
        let domain = Sid::new(5, &[21, 1, 2, 3]);
        Token {
            user: domain.with_rid(1001),
            primary_group: domain.with_rid(513),
            groups: vec![Sid::world(), Sid::authenticated_users()],
        }
    }

    fn with_dacl(owner: Sid, aces: Vec<Ace>) -> SecurityDescriptor {
        SecurityDescriptor {
            control: control::DACL_PRESENT,
            owner: Some(owner),
            group: None,
            dacl: Some(Acl::new(aces)),
            sacl: None,
        }
    }

    #[test]
    fn null_dacl_grants_all_and_empty_dacl_leaves_the_owner_its_implicit_rights() {
        let t = user();
        let mut sd = with_dacl(t.user.clone(), vec![]);
        assert_eq!(
            granted_rights(&sd, &t),
            rights::READ_CONTROL | rights::WRITE_DAC
        );
        sd.dacl = None;
        assert_eq!(granted_rights(&sd, &t), ALL_FILE_RIGHTS);
        let other = with_dacl(Sid::builtin_administrators(), vec![]);
        assert_eq!(granted_rights(&other, &t), 0);
    }

    #[test]
    fn the_first_ace_deciding_a_bit_wins() {
        let t = user();
        let sd = with_dacl(
            Sid::builtin_administrators(),
            vec![
                Ace::basic(ace_type::ACCESS_DENIED, 0, rights::DELETE, Sid::world()),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    0,
                    rights::GENERIC_ALL,
                    t.user.clone(),
                ),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    ace_flags::INHERIT_ONLY,
                    rights::DELETE,
                    Sid::world(),
                ),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    0,
                    rights::DELETE,
                    Sid::anonymous(),
                ),
            ],
        );
        assert_eq!(granted_rights(&sd, &t), ALL_FILE_RIGHTS & !rights::DELETE);
    }

    #[test]
    fn files_inherit_object_aces_and_directories_keep_propagating() {
        let t = user();
        let mut parent = with_dacl(
            Sid::builtin_administrators(),
            vec![
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT,
                    rights::GENERIC_ALL,
                    Sid::creator_owner(),
                ),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    ace_flags::OBJECT_INHERIT,
                    rights::FILE_GENERIC_READ,
                    Sid::world(),
                ),
                Ace::basic(
                    ace_type::ACCESS_ALLOWED,
                    0,
                    ALL_FILE_RIGHTS,
                    Sid::builtin_users(),
                ),
            ],
        );
        parent.control |= control::DACL_AUTO_INHERITED;
        let file = descriptor_for_new(&parent, None, &t, false);
        let aces = &file.dacl.as_ref().expect("a DACL").aces;
        assert_eq!(aces.len(), 2, "the non-inheritable ACE stays behind");
        assert_eq!(
            aces[0],
            Ace::basic(
                ace_type::ACCESS_ALLOWED,
                ace_flags::INHERITED,
                ALL_FILE_RIGHTS,
                t.user.clone()
            )
        );
        assert_eq!(aces[1].flags, ace_flags::INHERITED);
        assert_eq!(file.owner.as_ref(), Some(&t.user));
        let dir = descriptor_for_new(&parent, None, &t, true);
        let aces = &dir.dacl.as_ref().expect("a DACL").aces;
        assert_eq!(
            aces.len(),
            3,
            "creator-owner split in two, object ACE inherit-only"
        );
        assert_eq!(aces[0].mask_and_sid(), Some((ALL_FILE_RIGHTS, &t.user)));
        assert_eq!(
            aces[1].flags,
            ace_flags::OBJECT_INHERIT
                | ace_flags::CONTAINER_INHERIT
                | ace_flags::INHERIT_ONLY
                | ace_flags::INHERITED
        );
        assert_eq!(
            aces[2].flags,
            ace_flags::OBJECT_INHERIT | ace_flags::INHERIT_ONLY | ace_flags::INHERITED
        );
        assert_eq!(granted_rights(&dir, &t), ALL_FILE_RIGHTS);
        parent.control &= !control::DACL_AUTO_INHERITED;
        let plain = descriptor_for_new(&parent, None, &t, false);
        assert_eq!(plain.control & control::DACL_AUTO_INHERITED, 0);
        assert!(
            plain
                .dacl
                .expect("a DACL")
                .aces
                .iter()
                .all(|a| a.flags == 0),
            "not marked inherited below a parent that is not auto-inherited"
        );
    }

    #[test]
    fn a_supplied_dacl_wins_and_nothing_inheritable_gives_owner_and_system() {
        let t = user();
        let parent = with_dacl(Sid::builtin_administrators(), vec![]);
        let plain = descriptor_for_new(&parent, None, &t, false);
        assert_eq!(granted_rights(&plain, &t), ALL_FILE_RIGHTS);
        let supplied = with_dacl(Sid::world(), vec![]);
        let sd = descriptor_for_new(&default_descriptor(true), Some(&supplied), &t, false);
        assert_eq!(sd.owner, Some(Sid::world()));
        assert_eq!(sd.dacl, Some(Acl::new(vec![])));
        assert!(may_assign_owner(&t, &Sid::world()));
        assert!(!may_assign_owner(&t, &Sid::builtin_administrators()));
    }
}
