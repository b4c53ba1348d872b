//! QUERY_DIRECTORY search patterns: `*`, `?` and the DOS wildcards `<` (DOS_STAR), `>`
//! (DOS_QM) and `"` (DOS_DOT), matched case-insensitively as MS-FSA 2.1.4.4
//! (FsRtlIsNameInExpression) describes.
//!
//! Clients translate `*.*` and friends into DOS wildcards (e.g. `<"*`), so all five matter.

use super::names::fold_char;

/// Longest pattern accepted, in characters (a longer one is refused by [`Pattern::new`]).
pub const MAX_PATTERN_CHARS: usize = 1024;

/// One pattern element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// `*`: zero or more characters.
    Star,
    /// `?`: exactly one character.
    Qm,
    /// `<`: zero or more characters, not past the name's final `.` (which it may consume).
    DosStar,
    /// `>`: one character other than `.`; matches nothing at a `.` or the end of the name.
    DosQm,
    /// `"`: a `.`, or nothing at the end of the name.
    DosDot,
    /// A literal, already case-folded.
    Lit(char),
}

/// A compiled search pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    toks: Vec<Tok>,
}

/// The pattern is longer than [`MAX_PATTERN_CHARS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("search pattern too long")]
pub struct PatternTooLong;

impl Pattern {
    /// Compiles a pattern; the empty pattern means `*`.
    pub fn new(pattern: &str) -> Result<Pattern, PatternTooLong> {
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(PatternTooLong);
        }
        let src = if pattern.is_empty() { "*" } else { pattern };
        let toks = src
            .chars()
            .map(|c| match c {
                '*' => Tok::Star,
                '?' => Tok::Qm,
                '<' => Tok::DosStar,
                '>' => Tok::DosQm,
                '"' => Tok::DosDot,
                c => Tok::Lit(fold_char(c)),
            })
            .collect();
        Ok(Pattern { toks })
    }

    /// Whether the pattern matches every name (`*`, or empty).
    pub fn matches_all(&self) -> bool {
        self.toks == [Tok::Star]
    }

    /// The literal name when the pattern has no wildcard (a single-file lookup), else `None`.
    pub fn literal(&self) -> Option<String> {
        self.toks
            .iter()
            .map(|t| match t {
                Tok::Lit(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// Whether `name` matches, case-insensitively.
    pub fn matches(&self, name: &str) -> bool {
        if self.matches_all() {
            return true;
        }
        let name: Vec<char> = name.chars().map(fold_char).collect();
        // memo[(i, j)]: does toks[i..] match name[j..]? Filled bottom-up, so the work is
        // bounded by pattern length x name length x (name length for star-like tokens).
        let (pl, nl) = (self.toks.len(), name.len());
        let width = nl + 1;
        let mut memo = vec![false; (pl + 1) * width];
        let at = |i: usize, j: usize| i * width + j;
        if let Some(m) = memo.get_mut(at(pl, nl)) {
            *m = true;
        }
        // Index of the name's final '.'.
        let last_dot = name.iter().rposition(|c| *c == '.');
        for i in (0..pl).rev() {
            for j in (0..=nl).rev() {
                let next = |jj: usize| memo.get(at(i + 1, jj)).copied().unwrap_or(false);
                let here = |jj: usize| memo.get(at(i, jj)).copied().unwrap_or(false);
                let ch = name.get(j).copied();
                let v = match self.toks.get(i) {
                    Some(Tok::Star) => next(j) || (ch.is_some() && here(j + 1)),
                    Some(Tok::Qm) => ch.is_some() && next(j + 1),
                    Some(Tok::DosStar) => {
                        // May consume name[j..k] for k up to and including the final dot.
                        // Without any dot in the name it behaves like `*`.
                        let limit = match last_dot {
                            Some(d) => d + 1,
                            None => nl,
                        };
                        next(j) || (j < limit && here(j + 1))
                    }
                    Some(Tok::DosQm) => match ch {
                        None | Some('.') => next(j),
                        Some(_) => next(j + 1),
                    },
                    Some(Tok::DosDot) => match ch {
                        None => next(j),
                        Some('.') => next(j + 1),
                        Some(_) => false,
                    },
                    Some(Tok::Lit(c)) => ch == Some(*c) && next(j + 1),
                    None => false,
                };
                if let Some(m) = memo.get_mut(at(i, j)) {
                    *m = v;
                }
            }
        }
        memo.first().copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Pattern::new(p).unwrap().matches(n)
    }

    #[test]
    fn star_and_question_mark() {
        assert!(m("*", "anything.txt"));
        assert!(m("", "x"));
        assert!(m("*.txt", "notes.TXT"));
        assert!(!m("*.txt", "notes.txt.bak"));
        assert!(m("a?c", "ABC"));
        assert!(!m("a?c", "ac"));
        assert!(m("*a*b*", "xxAyyBzz"));
        assert!(!m("*a*b*", "xxByyAzz"));
        assert!(m("file*", "file"));
        assert!(m("exact.name", "EXACT.Name"));
        assert!(!m("exact.name", "exact.names"));
    }

    #[test]
    fn dos_star_stops_at_the_final_dot() {
        // "<" matches up to and including the final '.'.
        assert!(m("<.txt", "a.b.txt"));
        assert!(m("<", "noext"));
        assert!(!m("<", "a.b"));
        assert!(m("<b", "a.b"));
        assert!(m("a<c", "a.b.c"));
        assert!(!m("a<", "a.b.c"));
        // `<"*` is how clients send "*.*": every name matches.
        assert!(m("<\"*", "a.b.c"));
        assert!(m("<\"*", "noext"));
        assert!(m("<\"*", ".hidden"));
        // After consuming through the final dot, "<" cannot reach into the extension.
        assert!(!m("<x", "a.bx"));
        assert!(m("<bx", "a.bx"));
    }

    #[test]
    fn dos_qm_and_dos_dot() {
        // ">" eats one non-dot char, or nothing at a dot / the end.
        assert!(m("ab>>>.txt", "ab.txt"));
        assert!(m("ab>>>.txt", "abcde.txt"));
        assert!(!m("ab>>>.txt", "abcdef.txt"));
        assert!(m("a>", "a"));
        assert!(m("a>", "ab"));
        assert!(!m("a>", "abc"));
        // '"' matches a dot or the end of the name.
        assert!(m("abc\"", "abc"));
        assert!(m("abc\"txt", "abc.txt"));
        assert!(!m("abc\"txt", "abcxtxt"));
    }

    #[test]
    fn literal_and_limits() {
        assert_eq!(
            Pattern::new("Foo.TXT").unwrap().literal().as_deref(),
            Some("FOO.TXT")
        );
        assert_eq!(Pattern::new("f*").unwrap().literal(), None);
        assert!(Pattern::new("*").unwrap().matches_all());
        assert!(Pattern::new("").unwrap().matches_all());
        assert!(Pattern::new(&"*".repeat(MAX_PATTERN_CHARS + 1)).is_err());
        // A hostile pattern against a long name stays cheap (DP, no exponential backtracking).
        let p = Pattern::new(&"*a".repeat(200)).unwrap();
        assert!(!p.matches(&"a".repeat(199)));
    }
}
