//! Windows path syntax as an SMB client sends it: splitting, validation and case folding.
//!
//! Pure functions, shared by every [`super::ShareFs`] implementation so that the same names
//! are refused with the same status whatever the storage behind them.

use super::FsError;

/// Longest path accepted, in characters (the NT limit, 32 767 UTF-16 units).
pub const MAX_PATH_CHARS: usize = 32_767;
/// Longest component in bytes once stored (Linux NAME_MAX, UTF-8).
pub const MAX_COMPONENT_BYTES: usize = 255;
/// The unnamed data stream suffix a client may append (`file::$DATA` is `file`).
const DEFAULT_STREAM_SUFFIX: &str = "::$DATA";

/// Characters Windows forbids in a file name (besides control characters and `:`).
const ILLEGAL_CHARS: &[char] = &['\\', '/', '*', '?', '"', '<', '>', '|'];

/// Device names Windows reserves in every directory, with or without an extension.
const RESERVED_NAMES: &[&str] = &["CON", "PRN", "AUX", "NUL"];
/// Reserved device name prefixes followed by one digit 1-9 (COM1..COM9, LPT1..LPT9).
const RESERVED_NUMBERED: &[&str] = &["COM", "LPT"];

/// Splits a client path into validated components. The empty path is the share root (no
/// components). `\` separates components; `/` is accepted as a separator too (Samba does
/// the same, and smbtorture relies on it). One trailing separator is tolerated (`dir\`).
///
/// Refuses: a leading separator (an absolute path; Windows and Samba answer
/// INVALID_PARAMETER); empty components (`a\\b`) as OBJECT_NAME_INVALID; `.` and `..`
/// components as OBJECT_PATH_SYNTAX_BAD; anything [`validate_component`] refuses.
pub fn split_path(path: &str) -> Result<Vec<&str>, FsError> {
    if path.chars().count() > MAX_PATH_CHARS {
        return Err(FsError::NameTooLong);
    }
    if path.is_empty() {
        return Ok(Vec::new());
    }
    if path.starts_with(is_separator) {
        return Err(FsError::InvalidParameter(format!(
            "leading separator in {path:?}"
        )));
    }
    let trimmed = path.strip_suffix(is_separator).unwrap_or(path);
    let mut parts: Vec<&str> = trimmed.split(is_separator).collect();
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter_mut().enumerate() {
        if i == last {
            *part = strip_default_stream(part);
        }
        validate_component(part)?;
    }
    Ok(parts)
}

/// Path separators a client may use.
fn is_separator(c: char) -> bool {
    c == '\\' || c == '/'
}

/// Strips a trailing `::$DATA` (the unnamed stream), case-insensitively.
fn strip_default_stream(name: &str) -> &str {
    let n = name.len();
    let s = DEFAULT_STREAM_SUFFIX.len();
    if n > s
        && name.is_char_boundary(n - s)
        && name[n - s..].eq_ignore_ascii_case(DEFAULT_STREAM_SUFFIX)
    {
        &name[..n - s]
    } else {
        name
    }
}

/// Longest stream name in bytes once stored: what an xattr name leaves after the
/// storage layer's prefix (`user.quarry.stream.`, 19 of Linux's 255 bytes).
pub const MAX_STREAM_NAME_BYTES: usize = 236;

/// A client path split at its stream syntax (`file:stream[:$DATA]`, MS-FSCC 2.1.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPath<'a> {
    /// The file (or directory) path, still to be validated by [`split_path`].
    pub file: &'a str,
    /// The named data stream, as the client spelled it; `None` for the unnamed stream.
    pub stream: Option<&'a str>,
    /// The client named the unnamed stream explicitly (`file::$DATA`): a directory then
    /// cannot be opened (it has no data stream).
    pub explicit_default: bool,
}

/// Splits `path` at its first `:` into the file and its stream. The stream part must be
/// `name`, `name:$DATA` or `:$DATA` (the type case-insensitive), with no separator in it
/// (a `:` inside a directory component is refused) and the name at most
/// [`MAX_STREAM_NAME_BYTES`]; wildcards and control characters other than NUL are legal
/// in stream names, as on NTFS. Anything else is OBJECT_NAME_INVALID.
pub fn split_stream(path: &str) -> Result<StreamPath<'_>, FsError> {
    let Some((file, rest)) = path.split_once(':') else {
        return Ok(StreamPath {
            file: path,
            stream: None,
            explicit_default: false,
        });
    };
    let invalid = |why: &str| FsError::InvalidName(format!("stream syntax in {path:?}: {why}"));
    if rest.contains(is_separator) {
        return Err(invalid("separator after ':'"));
    }
    let mut parts = rest.splitn(3, ':');
    let name = parts.next().unwrap_or("");
    let kind = parts.next();
    if parts.next().is_some() {
        return Err(invalid("more than two ':'"));
    }
    if let Some(k) = kind {
        if !k.eq_ignore_ascii_case("$DATA") {
            return Err(invalid("stream type other than $DATA"));
        }
    }
    if name.is_empty() {
        return match kind {
            Some(_) => Ok(StreamPath {
                file,
                stream: None,
                explicit_default: true,
            }),
            None => Err(invalid("empty stream name")),
        };
    }
    if name.contains('\0') || name.len() > MAX_STREAM_NAME_BYTES {
        return Err(invalid("stream name too long or with NUL"));
    }
    Ok(StreamPath {
        file,
        stream: Some(name),
        explicit_default: false,
    })
}

/// Validates one path component (a file or directory name).
///
/// - empty → OBJECT_NAME_INVALID; `.`/`..` → OBJECT_PATH_SYNTAX_BAD (no escapes, ever);
/// - `:` (stream syntax, not yet served), `\ / * ? " < > |`, control characters →
///   OBJECT_NAME_INVALID;
/// - reserved device names (CON, PRN, AUX, NUL, COM1-9, LPT1-9, also with an extension
///   such as `nul.txt`) → OBJECT_NAME_INVALID;
/// - longer than [`MAX_COMPONENT_BYTES`] → OBJECT_NAME_INVALID.
pub fn validate_component(name: &str) -> Result<(), FsError> {
    if name.is_empty() {
        return Err(FsError::InvalidName("empty path component".into()));
    }
    if name == "." || name == ".." {
        return Err(FsError::PathSyntax(format!("{name:?} component")));
    }
    if name.len() > MAX_COMPONENT_BYTES {
        return Err(FsError::NameTooLong);
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == ':' || ILLEGAL_CHARS.contains(c) || c.is_control())
    {
        return Err(FsError::InvalidName(format!("character {c:?} in {name:?}")));
    }
    if is_reserved_device_name(name) {
        return Err(FsError::InvalidName(format!(
            "reserved device name {name:?}"
        )));
    }
    Ok(())
}

/// Whether `name` is a DOS device name (the part before the first `.`, trailing spaces
/// ignored, compared case-insensitively).
pub fn is_reserved_device_name(name: &str) -> bool {
    let base = name.split('.').next().unwrap_or(name).trim_end_matches(' ');
    if RESERVED_NAMES.iter().any(|r| base.eq_ignore_ascii_case(r)) {
        return true;
    }
    let bytes = base.as_bytes();
    bytes.len() == 4
        && RESERVED_NUMBERED
            .iter()
            .any(|r| base.get(..3).is_some_and(|p| p.eq_ignore_ascii_case(r)))
        && matches!(bytes.get(3), Some(b'1'..=b'9'))
}

/// Whether client path `path` is `dir` itself or lies beneath it, compared
/// case-insensitively (both `\`-separated, relative to the share; the empty `dir` is the
/// root, which contains everything). The server uses it to refuse renaming a directory while
/// files beneath it are open, as Windows does (ACCESS_DENIED).
pub fn path_is_within(path: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return true;
    }
    let (p, d): (Vec<char>, Vec<char>) = (
        path.chars().map(fold_char).collect(),
        dir.chars().map(fold_char).collect(),
    );
    p.len() >= d.len()
        && p.get(..d.len()) == Some(&d[..])
        && (p.len() == d.len() || p.get(d.len()) == Some(&'\\'))
}

/// Characters allowed in a DOS 8.3 name besides ASCII letters and digits.
const DOS_EXTRA_CHARS: &str = "!#$%&'()-@^_`{}~";
/// Longest base of an 8.3 name.
const DOS_BASE_LEN: usize = 8;
/// Longest extension of an 8.3 name.
const DOS_EXT_LEN: usize = 3;
/// Characters of the long name kept in front of the `~` of a generated short name.
const DOS_MANGLE_PREFIX: usize = 4;

fn dos_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || DOS_EXTRA_CHARS.contains(c)
}

/// Whether `name` is already a valid DOS 8.3 name (case-insensitively), so it is its own
/// short name (FileBothDirectoryInformation then reports no ShortName).
pub fn is_8dot3(name: &str) -> bool {
    if name == "." || name == ".." {
        return true;
    }
    let (base, ext) = match name.split_once('.') {
        Some((b, e)) => (b, Some(e)),
        None => (name, None),
    };
    let base_ok = (1..=DOS_BASE_LEN).contains(&base.len()) && base.chars().all(dos_char);
    let ext_ok =
        ext.is_none_or(|e| (1..=DOS_EXT_LEN).contains(&e.len()) && e.chars().all(dos_char));
    base_ok && ext_ok
}

/// The DOS 8.3 alternate name of `name` (FileAlternateNameInformation, the ShortName of
/// directory entries): the upper-cased name itself if it is 8.3 already, else a
/// deterministic mangled form `PREF~HHH.EXT` (a hash of the long name instead of a
/// per-directory counter, so it needs no directory state and is stable across listings).
pub fn short_name(name: &str) -> String {
    if is_8dot3(name) {
        return name.to_ascii_uppercase();
    }
    const FNV_OFFSET: u32 = 0x811c_9dc5;
    const FNV_PRIME: u32 = 0x0100_0193;
    let hash = name.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(FNV_PRIME)
    });
    let clean = |s: &str, n: usize| -> String {
        s.chars()
            .filter(|c| dos_char(*c))
            .take(n)
            .map(|c| c.to_ascii_uppercase())
            .collect()
    };
    let (base, ext) = match name.rsplit_once('.') {
        Some((b, e)) if !b.is_empty() => (b, e),
        _ => (name, ""),
    };
    let mut prefix = clean(base, DOS_MANGLE_PREFIX);
    if prefix.is_empty() {
        prefix.push('_');
    }
    let mut short = format!("{prefix}~{:03X}", hash & 0xFFF);
    let ext = clean(ext, DOS_EXT_LEN);
    if !ext.is_empty() {
        short.push('.');
        short.push_str(&ext);
    }
    short
}

/// Folds one character for case-insensitive comparison the way Windows does: a 1:1 upcase
/// (characters whose uppercase is several characters stay as they are).
pub fn fold_char(c: char) -> char {
    let mut up = c.to_uppercase();
    match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// The case-folded form of a name: the key of case-insensitive lookups.
pub fn fold(name: &str) -> String {
    name.chars().map(fold_char).collect()
}

/// Case-insensitive equality of two names.
pub fn eq_fold(a: &str, b: &str) -> bool {
    a.chars().map(fold_char).eq(b.chars().map(fold_char))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::nt;

    fn status(path: &str) -> u32 {
        split_path(path).unwrap_err().nt_status()
    }

    #[test]
    fn splits_plain_paths() {
        assert_eq!(split_path("").unwrap(), Vec::<&str>::new());
        assert_eq!(split_path("a").unwrap(), vec!["a"]);
        assert_eq!(
            split_path("dir\\sub\\file.txt").unwrap(),
            vec!["dir", "sub", "file.txt"]
        );
        assert_eq!(split_path("dir\\").unwrap(), vec!["dir"]);
        assert_eq!(split_path("dir/sub\\f").unwrap(), vec!["dir", "sub", "f"]);
        assert_eq!(split_path("f.bin::$DATA").unwrap(), vec!["f.bin"]);
        assert_eq!(split_path("f.bin::$data").unwrap(), vec!["f.bin"]);
        assert_eq!(
            split_path("héllo wörld.txt").unwrap(),
            vec!["héllo wörld.txt"]
        );
    }

    #[test]
    fn refuses_escapes_and_bad_syntax() {
        assert_eq!(status(".."), nt::OBJECT_PATH_SYNTAX_BAD);
        assert_eq!(status("a\\..\\..\\etc"), nt::OBJECT_PATH_SYNTAX_BAD);
        assert_eq!(status("a\\.\\b"), nt::OBJECT_PATH_SYNTAX_BAD);
        assert_eq!(status("\\etc\\passwd"), nt::INVALID_PARAMETER);
        assert_eq!(status("\\"), nt::INVALID_PARAMETER);
        assert_eq!(status("a\\\\b"), nt::OBJECT_NAME_INVALID);
        assert_eq!(status("a/../../b"), nt::OBJECT_PATH_SYNTAX_BAD);
        assert_eq!(status("/etc/passwd"), nt::INVALID_PARAMETER);
    }

    #[test]
    fn refuses_illegal_characters_and_streams() {
        for bad in [
            "a:b",
            "f.txt:stream",
            "f.txt:stream:$DATA",
            "a*",
            "a?",
            "a\"",
            "a<",
            "a>",
            "a|",
            "a\u{1}",
        ] {
            assert_eq!(status(bad), nt::OBJECT_NAME_INVALID, "{bad:?}");
        }
    }

    #[test]
    fn refuses_reserved_device_names() {
        for bad in [
            "CON",
            "con",
            "Prn",
            "aux.txt",
            "NUL.tar.gz",
            "COM1",
            "com9.log",
            "LPT3",
            "dir\\nul",
            "CON .txt",
        ] {
            assert_eq!(status(bad), nt::OBJECT_NAME_INVALID, "{bad:?}");
        }
        for ok in [
            "CONSOLE", "COM0", "COM10", "LPT", "nullable", "xcon", "aux_file",
        ] {
            assert!(split_path(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn refuses_overlong_names() {
        let long = "a".repeat(MAX_COMPONENT_BYTES + 1);
        assert_eq!(status(&long), nt::OBJECT_NAME_INVALID);
        assert!(split_path(&"a".repeat(MAX_COMPONENT_BYTES)).is_ok());
        let path = vec!["abc"; MAX_PATH_CHARS / 3].join("\\");
        assert_eq!(status(&path), nt::OBJECT_NAME_INVALID);
    }

    #[test]
    fn containment_is_by_component_and_case_insensitive() {
        assert!(path_is_within("Dir\\file", "dir"));
        assert!(path_is_within("dir", "DIR"));
        assert!(path_is_within("a\\b\\c", ""));
        assert!(!path_is_within("dir2\\file", "dir"));
        assert!(!path_is_within("di", "dir"));
    }

    #[test]
    fn short_names_are_8dot3() {
        assert!(is_8dot3("README.TXT"));
        assert!(is_8dot3("readme.txt"));
        assert!(is_8dot3("A"));
        assert!(!is_8dot3("longername.txt"));
        assert!(!is_8dot3("a.b.c"));
        assert!(!is_8dot3("a b.txt"));
        assert!(!is_8dot3("été.txt"));
        assert_eq!(short_name("readme.txt"), "README.TXT");
        for long in [
            "Long File Name.docx",
            "été.txt",
            ".bashrc",
            "a.b.c",
            "ñññññññññ",
        ] {
            let s = short_name(long);
            assert!(is_8dot3(&s), "{long:?} -> {s:?}");
            assert!(s.contains('~'), "{s}");
            assert_eq!(s, short_name(long), "deterministic");
        }
        assert!(short_name("Long File Name.docx").ends_with(".DOC"));
        assert_ne!(
            short_name("report-2024-01.pdf"),
            short_name("report-2024-02.pdf")
        );
    }

    #[test]
    fn folds_case_like_windows() {
        assert!(eq_fold("Readme.TXT", "README.txt"));
        assert!(eq_fold("ÉTÉ", "été"));
        assert!(!eq_fold("a", "b"));
        assert!(!eq_fold("ab", "a"));
        // ß upcases to "SS" (two characters): Windows keeps it distinct.
        assert!(!eq_fold("ß", "ss"));
        assert_eq!(fold("MiXeD"), "MIXED");
    }

    #[test]
    fn stream_syntax_splits_or_is_refused() {
        let sp = |p| split_stream(p).map_err(|e| e.nt_status());
        let named = |f, n| StreamPath {
            file: f,
            stream: Some(n),
            explicit_default: false,
        };
        assert_eq!(
            sp("a\\f.txt"),
            Ok(StreamPath {
                file: "a\\f.txt",
                stream: None,
                explicit_default: false
            })
        );
        assert_eq!(sp("f:One"), Ok(named("f", "One")));
        assert_eq!(sp("f:Two:$DaTa"), Ok(named("f", "Two")));
        assert_eq!(sp("f:?Str\x05eam*:$DATA"), Ok(named("f", "?Str\x05eam*")));
        assert_eq!(
            sp("f::$DATA"),
            Ok(StreamPath {
                file: "f",
                stream: None,
                explicit_default: true
            })
        );
        let invalid = Err(0xC000_0033);
        assert_eq!(sp("f:"), invalid, "empty stream name");
        assert_eq!(sp("f:One:"), invalid, "empty type");
        assert_eq!(sp("f:One:$FOO"), invalid);
        assert_eq!(sp("f:One:$DATA:x"), invalid);
        assert_eq!(sp("d:x\\f"), invalid, "':' in a directory component");
        assert_eq!(
            sp(&format!("f:{}", "s".repeat(MAX_STREAM_NAME_BYTES + 1))),
            invalid
        );
    }
}
