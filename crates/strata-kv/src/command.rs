//! Requests as typed commands: the argument lists of [`crate::resp`]
//! checked (arity, options, numbers) into a [`Command`], sans I/O.
//!
//! Errors are the replies Redis gives for the same mistakes, so that
//! client libraries and their users see familiar messages.

use bytes::Bytes;

use crate::resp::Reply;
use crate::store::Pin;

/// When a SET's value expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Keep no expiry (or, with `KEEPTTL`, the old one).
    None,
    /// Milliseconds from now.
    In(u64),
    /// Unix milliseconds.
    At(u64),
    /// Keep the key's current expiry.
    Keep,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Command {
    /// `PING [message]`
    Ping(Option<Bytes>),
    /// `ECHO message`
    Echo(Bytes),
    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`
    Hello {
        /// The protocol to switch to.
        proto: Option<u8>,
        /// `AUTH user pass`: authenticate first.
        auth: Option<(Bytes, Bytes)>,
    },
    /// `AUTH [user] password`
    Auth {
        /// The user; `None`: `default`.
        user: Option<Bytes>,
        /// The password.
        password: Bytes,
    },
    /// `QUIT`
    Quit,
    /// `SELECT db`: only database 0 exists.
    Select(i64),
    /// `CLIENT ...`, `READONLY` and other connection settings that need
    /// no action: answered `OK`.
    NoOp,
    /// `CLIENT ID` and friends that want an integer.
    ClientId,
    /// `INFO [section]`
    Info,
    /// `CONFIG GET pattern`
    ConfigGet(Bytes),
    /// `COMMAND [...]`: an empty list (clients use it for hints only).
    CommandDocs,
    /// `DBSIZE`
    DbSize,
    /// `FLUSHDB` / `FLUSHALL`
    Flush,
    /// `SAVE`: everything in DRAM written to SSD and synced.
    Save,
    /// `GET key`
    Get(Bytes),
    /// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`
    Set {
        /// Key.
        key: Bytes,
        /// Value.
        value: Bytes,
        /// Expiry.
        expiry: Expiry,
        /// Only if absent.
        nx: bool,
        /// Only if present.
        xx: bool,
        /// Reply with the old value.
        get: bool,
    },
    /// `MGET key...`
    MGet(Vec<Bytes>),
    /// `MSET key value [key value ...]`
    MSet(Vec<(Bytes, Bytes)>),
    /// `EXISTS key...`
    Exists(Vec<Bytes>),
    /// `DEL key...` / `UNLINK key...`
    Del(Vec<Bytes>),
    /// `STRLEN key`
    StrLen(Bytes),
    /// `TTL key` (false) / `PTTL key` (true)
    Ttl(Bytes, bool),
    /// `EXPIRE key s` / `PEXPIRE key ms`, as milliseconds; `PERSIST` is 0.
    Expire(Bytes, Option<u64>),
    /// `KV.LOOKUP key...`: consecutive keys present from the first.
    Lookup(Vec<Bytes>),
    /// `KV.PREFETCH deadline_ms [LEASE ms] key...`
    Prefetch {
        /// Deadline.
        deadline_ms: u64,
        /// Lease length; 0: none.
        lease_ms: u64,
        /// The chain.
        keys: Vec<Bytes>,
    },
    /// `KV.LEASE ms key...`
    Lease(u64, Vec<Bytes>),
    /// `KV.RELEASE key...`
    Release(Vec<Bytes>),
    /// `KV.PIN SOFT|HARD key...` / `KV.UNPIN key...`
    Pin(Pin, Vec<Bytes>),
    /// `KV.STATS`
    Stats,
    /// `KV.NS [name]`: show or set the connection's namespace.
    Namespace(Option<Bytes>),
    /// `KV.DELNS name`
    DelNamespace(Bytes),
    /// `KV.QUOTA name [bytes]`: show a namespace's usage and quota, or
    /// set the quota (0: none).
    Quota(Bytes, Option<u64>),
    /// `KV.FLUSH [ALL]`: make demoted blocks durable (ALL: every block).
    KvFlush(bool),
}

fn wrong_args(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{}' command", name.to_ascii_lowercase()))
}

/// Redis's answer to a HELLO option it does not know or that lacks its
/// arguments.
fn syntax_hello(opt: &[u8]) -> Reply {
    Reply::err(format!("Syntax error in HELLO option '{}'", String::from_utf8_lossy(opt)))
}

fn syntax() -> Reply {
    Reply::err("syntax error")
}

fn int(b: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err("value is not an integer or out of range"))
}

fn non_neg(b: &[u8]) -> Result<u64, Reply> {
    u64::try_from(int(b)?).map_err(|_| Reply::err("value is out of range, must be positive"))
}

/// A positive expire time, in milliseconds when `unit_ms` is 1.
fn expire_ms(b: &[u8], unit_ms: u64, cmd: &str) -> Result<u64, Reply> {
    let n = int(b)?;
    if n <= 0 {
        return Err(Reply::err(format!("invalid expire time in '{cmd}' command")));
    }
    (n as u64).checked_mul(unit_ms).ok_or_else(|| Reply::err(format!("invalid expire time in '{cmd}' command")))
}

impl Command {
    /// Checks a request's arguments into a command; the error is the
    /// reply to send.
    ///
    /// # Errors
    ///
    /// Unknown command, wrong arity, bad option or number.
    pub fn parse(mut args: Vec<Bytes>) -> Result<Command, Reply> {
        if args.is_empty() {
            return Err(Reply::err("empty command"));
        }
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let rest: Vec<Bytes> = args.drain(1..).collect();
        let n = rest.len();
        let arity = |ok: bool| if ok { Ok(()) } else { Err(wrong_args(&name)) };
        let one = |rest: &[Bytes]| rest[0].clone();
        Ok(match name.as_str() {
            "PING" => {
                arity(n <= 1)?;
                Command::Ping(rest.into_iter().next())
            }
            "ECHO" => {
                arity(n == 1)?;
                Command::Echo(one(&rest))
            }
            "HELLO" => {
                let proto = match rest.first() {
                    None => None,
                    Some(v) => match int(v) {
                        Ok(p @ 2..=3) => Some(p as u8),
                        _ => return Err(Reply::Error("NOPROTO unsupported protocol version".into())),
                    },
                };
                let mut auth = None;
                let mut opts = rest.iter().skip(1);
                while let Some(o) = opts.next() {
                    match String::from_utf8_lossy(o).to_ascii_uppercase().as_str() {
                        "AUTH" => match (opts.next(), opts.next()) {
                            (Some(u), Some(p)) => auth = Some((u.clone(), p.clone())),
                            _ => return Err(syntax_hello(o)),
                        },
                        "SETNAME" if opts.next().is_some() => {}
                        _ => return Err(syntax_hello(o)),
                    }
                }
                Command::Hello { proto, auth }
            }
            "AUTH" => {
                arity(n == 1 || n == 2)?;
                let mut it = rest.into_iter();
                match (it.next(), it.next()) {
                    (Some(password), None) => Command::Auth { user: None, password },
                    (Some(user), Some(password)) => Command::Auth { user: Some(user), password },
                    _ => return Err(wrong_args(&name)),
                }
            }
            "QUIT" => Command::Quit,
            "SELECT" => {
                arity(n == 1)?;
                Command::Select(int(&rest[0])?)
            }
            "CLIENT" => match rest.first().map(|s| String::from_utf8_lossy(s).to_ascii_uppercase()).as_deref() {
                Some("ID") => Command::ClientId,
                Some(_) => Command::NoOp,
                None => return Err(wrong_args(&name)),
            },
            "READONLY" | "READWRITE" | "RESET" => Command::NoOp,
            "INFO" => Command::Info,
            "CONFIG" => {
                arity(n >= 1)?;
                match String::from_utf8_lossy(&rest[0]).to_ascii_uppercase().as_str() {
                    "GET" if n == 2 => Command::ConfigGet(rest[1].clone()),
                    "GET" => return Err(wrong_args("config|get")),
                    "SET" | "RESETSTAT" | "REWRITE" => Command::NoOp,
                    _ => return Err(syntax()),
                }
            }
            "COMMAND" => Command::CommandDocs,
            "DBSIZE" => Command::DbSize,
            "FLUSHDB" | "FLUSHALL" => Command::Flush,
            "SAVE" | "BGSAVE" => Command::Save,
            "GET" => {
                arity(n == 1)?;
                Command::Get(one(&rest))
            }
            "SET" => {
                arity(n >= 2)?;
                parse_set(rest)?
            }
            "MGET" => {
                arity(n >= 1)?;
                Command::MGet(rest)
            }
            "MSET" => {
                arity(n >= 2 && n.is_multiple_of(2))?;
                let mut it = rest.into_iter();
                let mut pairs = Vec::with_capacity(n / 2);
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Command::MSet(pairs)
            }
            "EXISTS" => {
                arity(n >= 1)?;
                Command::Exists(rest)
            }
            "DEL" | "UNLINK" => {
                arity(n >= 1)?;
                Command::Del(rest)
            }
            "STRLEN" => {
                arity(n == 1)?;
                Command::StrLen(one(&rest))
            }
            "TTL" | "PTTL" => {
                arity(n == 1)?;
                Command::Ttl(one(&rest), name == "PTTL")
            }
            "EXPIRE" | "PEXPIRE" => {
                arity(n == 2)?;
                let unit = if name == "EXPIRE" { 1000 } else { 1 };
                Command::Expire(one(&rest), Some(expire_ms(&rest[1], unit, &name.to_ascii_lowercase())?))
            }
            "PERSIST" => {
                arity(n == 1)?;
                Command::Expire(one(&rest), None)
            }
            "KV.LOOKUP" => {
                arity(n >= 1)?;
                Command::Lookup(rest)
            }
            "KV.PREFETCH" => {
                arity(n >= 2)?;
                let deadline_ms = non_neg(&rest[0])?;
                let (lease_ms, from) = if rest[1].eq_ignore_ascii_case(b"LEASE") {
                    arity(n >= 4)?;
                    (non_neg(&rest[2])?, 3)
                } else {
                    (0, 1)
                };
                Command::Prefetch { deadline_ms, lease_ms, keys: rest[from..].to_vec() }
            }
            "KV.LEASE" => {
                arity(n >= 2)?;
                Command::Lease(non_neg(&rest[0])?, rest[1..].to_vec())
            }
            "KV.RELEASE" => {
                arity(n >= 1)?;
                Command::Release(rest)
            }
            "KV.PIN" => {
                arity(n >= 2)?;
                let pin = match String::from_utf8_lossy(&rest[0]).to_ascii_uppercase().as_str() {
                    "SOFT" => Pin::Soft,
                    "HARD" => Pin::Hard,
                    _ => return Err(syntax()),
                };
                Command::Pin(pin, rest[1..].to_vec())
            }
            "KV.UNPIN" => {
                arity(n >= 1)?;
                Command::Pin(Pin::None, rest)
            }
            "KV.STATS" => Command::Stats,
            "KV.NS" => {
                arity(n <= 1)?;
                Command::Namespace(rest.into_iter().next())
            }
            "KV.DELNS" => {
                arity(n == 1)?;
                Command::DelNamespace(one(&rest))
            }
            "KV.QUOTA" => {
                arity(n == 1 || n == 2)?;
                let bytes = rest.get(1).map(|b| non_neg(b)).transpose()?;
                Command::Quota(one(&rest), bytes)
            }
            "KV.FLUSH" => match rest.first() {
                None => Command::KvFlush(false),
                Some(a) if a.eq_ignore_ascii_case(b"ALL") => Command::KvFlush(true),
                Some(_) => return Err(syntax()),
            },
            _ => {
                let shown: Vec<String> = rest
                    .iter()
                    .take(3)
                    .map(|a| format!("'{}'", String::from_utf8_lossy(&a[..a.len().min(64)])))
                    .collect();
                return Err(Reply::err(format!(
                    "unknown command '{}', with args beginning with: {}",
                    String::from_utf8_lossy(&args[0][..args[0].len().min(64)]),
                    shown.join(" ")
                )));
            }
        })
    }
}

fn parse_set(rest: Vec<Bytes>) -> Result<Command, Reply> {
    let mut it = rest.into_iter();
    let (Some(key), Some(value)) = (it.next(), it.next()) else { return Err(wrong_args("set")) };
    let (mut expiry, mut nx, mut xx, mut get) = (Expiry::None, false, false, false);
    while let Some(opt) = it.next() {
        let o = String::from_utf8_lossy(&opt).to_ascii_uppercase();
        let set_expiry = |e: &mut Expiry, v: Expiry| {
            if *e != Expiry::None {
                return Err(syntax());
            }
            *e = v;
            Ok(())
        };
        match o.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" => set_expiry(&mut expiry, Expiry::Keep)?,
            "EX" | "PX" | "EXAT" | "PXAT" => {
                let v = it.next().ok_or_else(syntax)?;
                let unit = if o.starts_with('E') { 1000 } else { 1 };
                let ms = expire_ms(&v, unit, "set")?;
                set_expiry(&mut expiry, if o.ends_with("AT") { Expiry::At(ms) } else { Expiry::In(ms) })?;
            }
            _ => return Err(syntax()),
        }
    }
    Ok(Command::Set { key, value, expiry, nx, xx, get })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &[&str]) -> Result<Command, Reply> {
        Command::parse(words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect())
    }

    #[test]
    fn commands_parse_with_their_options() {
        assert_eq!(p(&["get", "k"]).unwrap(), Command::Get(Bytes::from("k")));
        assert!(matches!(
            p(&["SET", "k", "v", "px", "100", "NX"]).unwrap(),
            Command::Set { expiry: Expiry::In(100), nx: true, xx: false, get: false, .. }
        ));
        assert!(matches!(p(&["set", "k", "v", "EX", "2"]).unwrap(), Command::Set { expiry: Expiry::In(2000), .. }));
        assert!(matches!(
            p(&["KV.PREFETCH", "50", "LEASE", "1000", "a", "b"]).unwrap(),
            Command::Prefetch { deadline_ms: 50, lease_ms: 1000, ref keys } if keys.len() == 2
        ));
        assert_eq!(
            p(&["MSET", "a", "1", "b", "2"]).unwrap(),
            Command::MSet(vec![(Bytes::from("a"), Bytes::from("1")), (Bytes::from("b"), Bytes::from("2"))])
        );
        let b = |w: &str| Bytes::copy_from_slice(w.as_bytes());
        assert_eq!(p(&["AUTH", "pw"]).unwrap(), Command::Auth { user: None, password: b("pw") });
        assert_eq!(p(&["auth", "u", "pw"]).unwrap(), Command::Auth { user: Some(b("u")), password: b("pw") });
        assert_eq!(p(&["HELLO"]).unwrap(), Command::Hello { proto: None, auth: None });
        assert_eq!(
            p(&["HELLO", "3", "SETNAME", "me", "auth", "u", "pw"]).unwrap(),
            Command::Hello { proto: Some(3), auth: Some((b("u"), b("pw"))) }
        );
    }

    #[test]
    fn mistakes_get_redis_errors() {
        let err = |w: &[&str]| match p(w) {
            Err(Reply::Error(e)) => e,
            other => panic!("{w:?}: {other:?}"),
        };
        assert_eq!(err(&["GET"]), "ERR wrong number of arguments for 'get' command");
        assert_eq!(err(&["MSET", "a"]), "ERR wrong number of arguments for 'mset' command");
        assert_eq!(err(&["SET", "k", "v", "NX", "XX"]), "ERR syntax error");
        assert_eq!(err(&["SET", "k", "v", "EX", "0"]), "ERR invalid expire time in 'set' command");
        assert_eq!(err(&["SET", "k", "v", "EX", "x"]), "ERR value is not an integer or out of range");
        assert_eq!(err(&["SET", "k", "v", "EX", "99999999999999999"]), "ERR invalid expire time in 'set' command");
        assert_eq!(err(&["NOPE", "a"]), "ERR unknown command 'NOPE', with args beginning with: 'a'");
        assert!(err(&["HELLO", "4"]).starts_with("NOPROTO"));
        assert_eq!(err(&["HELLO", "3", "AUTH", "u"]), "ERR Syntax error in HELLO option 'AUTH'");
        assert_eq!(err(&["HELLO", "3", "BOGUS"]), "ERR Syntax error in HELLO option 'BOGUS'");
        assert_eq!(err(&["AUTH"]), "ERR wrong number of arguments for 'auth' command");
        assert_eq!(err(&["AUTH", "a", "b", "c"]), "ERR wrong number of arguments for 'auth' command");
        assert_eq!(err(&["KV.PIN", "MEDIUM", "k"]), "ERR syntax error");
    }
}
