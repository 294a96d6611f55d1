//! Redis's glob patterns (`KEYS`, `SCAN ... MATCH`, `CONFIG GET`), sans
//! I/O: a pattern from the network compiled once into a [`Glob`], then
//! matched against byte strings.
//!
//! The syntax is Redis's (`stringmatchlen` in its `util.c`), byte by
//! byte:
//!
//! - `*` matches any run of bytes, `?` any one byte;
//! - `[abc]` one of the bytes listed, `[a-z]` a range (either order),
//!   `[^...]` any byte not listed; `\x` inside a class is `x`; a class
//!   left open at the end of the pattern ends there; `[]` matches
//!   nothing and `[^]` any byte;
//! - `\x` outside a class is `x` itself (a `\` ending the pattern is a
//!   `\`); every other byte is itself;
//! - the empty string matches only the empty pattern, except that the
//!   pattern `*` alone matches everything (Redis's `KEYS` and `SCAN` skip
//!   matching for it, so they list the empty key; `**` does not).
//!
//! Redis matches `*` by recursion, which takes exponential time on
//! patterns of many stars. This matcher backtracks only to the last star
//! seen (each other token consumes exactly one byte, so that suffices),
//! which bounds a match by the pattern's length times the string's.
//! Patterns are bounded by the request limits; a class keeps its items.

/// One byte-consuming item of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// This byte.
    Byte(u8),
    /// Bytes from the first to the second, inclusive.
    Range(u8, u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// `*`: any run of bytes (runs of stars are one token).
    Star,
    /// `?`: one byte.
    Any,
    /// `[...]`: one byte in (or, negated, not in) the items.
    Class { negated: bool, items: Vec<Item> },
    /// One byte, itself.
    Byte(u8),
}

impl Token {
    /// True when this one-byte token takes `c` (never called on `Star`).
    fn takes(&self, c: u8) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Byte(b) => *b == c,
            Token::Class { negated, items } => {
                let hit = items.iter().any(|i| match *i {
                    Item::Byte(b) => b == c,
                    Item::Range(lo, hi) => lo <= c && c <= hi,
                });
                hit != *negated
            }
        }
    }
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
    /// The pattern is `*` alone.
    all: bool,
}

impl Glob {
    /// Compiles `pattern`. Every byte string is a pattern: there is no
    /// error (as in Redis, a malformed class is read as far as it goes).
    pub fn new(pattern: &[u8]) -> Glob {
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < pattern.len() {
            match pattern[i] {
                b'*' => {
                    if tokens.last() != Some(&Token::Star) {
                        tokens.push(Token::Star);
                    }
                    i += 1;
                }
                b'?' => {
                    tokens.push(Token::Any);
                    i += 1;
                }
                b'[' => {
                    let (token, next) = class(pattern, i + 1);
                    tokens.push(token);
                    i = next;
                }
                b'\\' if i + 1 < pattern.len() => {
                    tokens.push(Token::Byte(pattern[i + 1]));
                    i += 2;
                }
                b => {
                    tokens.push(Token::Byte(b));
                    i += 1;
                }
            }
        }
        Glob { tokens, all: pattern == b"*" }
    }

    /// True when the pattern is `*` alone: it matches everything.
    pub fn matches_all(&self) -> bool {
        self.all
    }

    /// True when `s` matches the whole pattern.
    pub fn matches(&self, s: &[u8]) -> bool {
        if self.all {
            return true;
        }
        if s.is_empty() {
            return self.tokens.is_empty();
        }
        let t = &self.tokens;
        let (mut ti, mut si) = (0, 0);
        // Where to resume after the last star: (the token after it, the
        // next byte it would swallow).
        let mut resume: Option<(usize, usize)> = None;
        loop {
            if ti < t.len() {
                if t[ti] == Token::Star {
                    resume = Some((ti + 1, si));
                    ti += 1;
                    continue;
                }
                if si < s.len() && t[ti].takes(s[si]) {
                    ti += 1;
                    si += 1;
                    continue;
                }
            } else if si == s.len() {
                return true;
            }
            // A mismatch (or pattern left over, or string left over):
            // let the last star swallow one more byte, if there is one.
            match resume {
                Some((after, from)) if from < s.len() => {
                    resume = Some((after, from + 1));
                    ti = after;
                    si = from + 1;
                }
                _ => return false,
            }
        }
    }
}

/// Reads a class starting just after its `[`; returns the token and the
/// index after it (Redis's rules, the module doc).
fn class(p: &[u8], mut i: usize) -> (Token, usize) {
    let negated = p.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    while i < p.len() {
        match p[i] {
            b'\\' if i + 1 < p.len() => {
                items.push(Item::Byte(p[i + 1]));
                i += 2;
            }
            b']' => return (Token::Class { negated, items }, i + 1),
            lo if i + 2 < p.len() && p[i + 1] == b'-' => {
                let hi = p[i + 2];
                items.push(Item::Range(lo.min(hi), lo.max(hi)));
                i += 3;
            }
            b => {
                items.push(Item::Byte(b));
                i += 1;
            }
        }
    }
    // Left open: the class ends with the pattern.
    (Token::Class { negated, items }, i)
}

/// Redis's own recursive algorithm (`stringmatchlen`, without its
/// nesting limit), transliterated: the reference the tests and the fuzz
/// target hold [`Glob`] to. Exponential on many stars: short inputs only.
#[doc(hidden)]
pub fn reference_match(p: &[u8], s: &[u8]) -> bool {
    let (mut p, mut s) = (p, s);
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                loop {
                    if reference_match(&p[1..], s) {
                        return true;
                    }
                    s = &s[1..];
                    if s.is_empty() {
                        break;
                    }
                }
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let not = p.first() == Some(&b'^');
                if not {
                    p = &p[1..];
                }
                let mut hit = false;
                loop {
                    if p.first() == Some(&b'\\') && p.len() >= 2 {
                        p = &p[1..];
                        if p[0] == s[0] {
                            hit = true;
                        }
                    } else if p.is_empty() || p[0] == b']' {
                        // The class's end, or the pattern's.
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (lo, hi) = (p[0].min(p[2]), p[0].max(p[2]));
                        p = &p[2..];
                        if lo <= s[0] && s[0] <= hi {
                            hit = true;
                        }
                    } else if p[0] == s[0] {
                        hit = true;
                    }
                    p = &p[1..];
                }
                if hit == not {
                    return false;
                }
                s = &s[1..];
                if p.is_empty() {
                    // A class left open ended the pattern.
                    return s.is_empty();
                }
            }
            c => {
                let c = if c == b'\\' && p.len() >= 2 {
                    p = &p[1..];
                    p[0]
                } else {
                    c
                };
                if c != s[0] {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        let got = Glob::new(p.as_bytes()).matches(s.as_bytes());
        if p != "*" {
            assert_eq!(got, reference_match(p.as_bytes(), s.as_bytes()), "{p:?} on {s:?}: Glob and Redis disagree");
        }
        got
    }

    #[test]
    fn redis_patterns_match_as_in_redis() {
        assert!(m("*", "") && m("*", "anything") && m("h?llo", "hello") && !m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo") && m("h*llo", "heeeello") && !m("h*llo", "helloo"));
        assert!(m("h[ae]llo", "hallo") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo") && m("h[b-a]llo", "hallo") && !m("h[a-b]llo", "hcllo"));
        assert!(m("key\\*", "key*") && !m("key\\*", "keyx") && m("a\\", "a\\"));
        assert!(m("[\\]]", "]") && m("[a\\-z]", "-") && !m("[a\\-z]", "b"));
        assert!(!m("[]", "a") && m("[^]", "a") && m("[abc", "b") && !m("[abc", "bb"));
        assert!(m("user:*:session", "user:42:session") && !m("user:*:session", "user:42:sessions"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx") && !m("*a*b*c*", "xxaxxcxxbxx"));
        assert!(m("", "") && !m("", "a") && !m("a", ""));
        assert!(m("*", "") && !m("**", "") && !m("?*", ""), "the empty key: only `*` alone lists it");
    }

    #[test]
    fn many_stars_take_linear_time_not_exponential() {
        let p = "*a".repeat(40) + "b";
        let s = "a".repeat(4000);
        assert!(!Glob::new(p.as_bytes()).matches(s.as_bytes()));
    }

    #[test]
    fn glob_agrees_with_redis_on_random_patterns() {
        let mut rng = strata_rand::Rng::new(7);
        let alphabet = b"ab*?[]^-\\c";
        for _ in 0..200_000 {
            let p: Vec<u8> = (0..rng.below(7)).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
            let s: Vec<u8> = (0..rng.below(6)).map(|_| b"abc-]"[rng.below(5) as usize]).collect();
            if p == b"*" {
                continue;
            }
            assert_eq!(
                Glob::new(&p).matches(&s),
                reference_match(&p, &s),
                "{:?} on {:?}",
                String::from_utf8_lossy(&p),
                String::from_utf8_lossy(&s)
            );
        }
    }
}
