//! Requests as typed commands: the argument lists of [`crate::resp`]
//! checked (arity, options, numbers) into a [`Command`], sans I/O.
//!
//! Errors are the replies Redis gives for the same mistakes, so that
//! client libraries and their users see familiar messages. A request
//! that does not parse (unknown command, wrong arity, bad option) is
//! refused here, before anything runs: inside `MULTI` that aborts the
//! transaction at `EXEC` (the server's `txn` module).

use bytes::Bytes;

use crate::resp::Reply;
use crate::store::Pin;

/// When an `EXPIRE`-family command makes a key expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireAt {
    /// Milliseconds from now; zero or less deletes the key.
    In(i64),
    /// Unix milliseconds; now or earlier deletes the key.
    At(i64),
    /// No expiry (`PERSIST`).
    Never,
}

/// What `GETEX` does to the key's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetExpiry {
    /// Leaves it.
    Keep,
    /// Sets it (`EX`, `PX`, `EXAT`, `PXAT`).
    Set(Expiry),
    /// Removes it (`PERSIST`).
    Persist,
}

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
    /// `RESET`: the connection as new (no transaction, RESP2, the
    /// default namespace, and unauthenticated where passwords are on).
    Reset,
    /// `SELECT db`: only database 0 exists.
    Select(i64),
    /// `CLIENT ...`, `READONLY` and other connection settings that need
    /// no action: answered `OK`.
    NoOp,
    /// `CLIENT ID` and friends that want an integer.
    ClientId,
    /// `INFO [section ...]`
    Info(Vec<Bytes>),
    /// `CONFIG GET pattern [pattern ...]`
    ConfigGet(Vec<Bytes>),
    /// `CONFIG SET param value [param value ...]`, `CONFIG RESETSTAT`,
    /// `CONFIG REWRITE`: refused (settings come from the command line);
    /// the subcommand and the first parameter, for the error.
    ConfigRefused(String, Option<Bytes>),
    /// `MULTI`: start queueing a transaction.
    Multi,
    /// `EXEC`: run the queued transaction.
    Exec,
    /// `DISCARD`: drop the queued transaction.
    Discard,
    /// `WATCH key...`: refused (no optimistic locking).
    Watch,
    /// `UNWATCH`: nothing is ever watched; `OK`.
    Unwatch,
    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`
    Scan {
        /// Where to go on from (0: the start).
        cursor: u64,
        /// Keys must match this glob.
        pattern: Option<Bytes>,
        /// About how many keys to examine.
        count: usize,
        /// Keys must be of this type (only `string` exists).
        kind: Option<Bytes>,
    },
    /// `KEYS pattern`
    Keys(Bytes),
    /// `TYPE key`
    Type(Bytes),
    /// `GETDEL key`
    GetDel(Bytes),
    /// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`
    GetEx(Bytes, GetExpiry),
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
    /// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`, `PERSIST`.
    Expire(Bytes, ExpireAt),
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

fn invalid_expire(cmd: &str) -> Reply {
    Reply::err(format!("invalid expire time in '{cmd}' command"))
}

/// A positive expire time, in milliseconds when `unit_ms` is 1.
fn expire_ms(b: &[u8], unit_ms: u64, cmd: &str) -> Result<u64, Reply> {
    let n = int(b)?;
    if n <= 0 {
        return Err(invalid_expire(cmd));
    }
    (n as u64).checked_mul(unit_ms).ok_or_else(|| invalid_expire(cmd))
}

/// An `EXPIRE`-family time, any sign, in milliseconds.
fn expire_any_ms(b: &[u8], unit_ms: i64, cmd: &str) -> Result<i64, Reply> {
    int(b)?.checked_mul(unit_ms).ok_or_else(|| invalid_expire(cmd))
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
            "READONLY" | "READWRITE" => Command::NoOp,
            "RESET" => {
                arity(n == 0)?;
                Command::Reset
            }
            "INFO" => Command::Info(rest),
            "CONFIG" => {
                arity(n >= 1)?;
                let sub = String::from_utf8_lossy(&rest[0]).to_ascii_uppercase();
                match sub.as_str() {
                    "GET" if n >= 2 => Command::ConfigGet(rest[1..].to_vec()),
                    "GET" => return Err(wrong_args("config|get")),
                    "SET" if n >= 3 && n % 2 == 1 => Command::ConfigRefused(sub, Some(rest[1].clone())),
                    "SET" => return Err(wrong_args("config|set")),
                    "RESETSTAT" | "REWRITE" if n == 1 => Command::ConfigRefused(sub, None),
                    "RESETSTAT" | "REWRITE" => return Err(wrong_args(&format!("config|{sub}"))),
                    _ => {
                        return Err(Reply::err(format!(
                            "unknown subcommand '{}'. Try CONFIG HELP.",
                            String::from_utf8_lossy(&rest[0][..rest[0].len().min(64)])
                        )));
                    }
                }
            }
            "MULTI" => {
                arity(n == 0)?;
                Command::Multi
            }
            "EXEC" => {
                arity(n == 0)?;
                Command::Exec
            }
            "DISCARD" => {
                arity(n == 0)?;
                Command::Discard
            }
            "WATCH" => {
                arity(n >= 1)?;
                Command::Watch
            }
            "UNWATCH" => {
                arity(n == 0)?;
                Command::Unwatch
            }
            "SCAN" => {
                arity(n >= 1)?;
                parse_scan(&rest)?
            }
            "KEYS" => {
                arity(n == 1)?;
                Command::Keys(one(&rest))
            }
            "TYPE" => {
                arity(n == 1)?;
                Command::Type(one(&rest))
            }
            "GETDEL" => {
                arity(n == 1)?;
                Command::GetDel(one(&rest))
            }
            "GETEX" => {
                arity(n >= 1)?;
                parse_getex(&rest)?
            }
            "SETEX" | "PSETEX" => {
                arity(n == 3)?;
                let unit = if name == "SETEX" { 1000 } else { 1 };
                let ms = expire_ms(&rest[1], unit, &name.to_ascii_lowercase())?;
                let mut it = rest.into_iter();
                let (Some(key), _, Some(value)) = (it.next(), it.next(), it.next()) else {
                    return Err(wrong_args(&name));
                };
                Command::Set { key, value, expiry: Expiry::In(ms), nx: false, xx: false, get: false }
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
            "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => {
                arity(n == 2)?;
                let unit = if name.starts_with('P') { 1 } else { 1000 };
                let ms = expire_any_ms(&rest[1], unit, &name.to_ascii_lowercase())?;
                Command::Expire(one(&rest), if name.ends_with("AT") { ExpireAt::At(ms) } else { ExpireAt::In(ms) })
            }
            "PERSIST" => {
                arity(n == 1)?;
                Command::Expire(one(&rest), ExpireAt::Never)
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

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`, options in any
/// order, the last of each kind winning (as Redis).
fn parse_scan(rest: &[Bytes]) -> Result<Command, Reply> {
    let cursor = std::str::from_utf8(&rest[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Reply::err("invalid cursor"))?;
    let (mut pattern, mut count, mut kind) = (None, 10usize, None);
    let mut opts = rest[1..].iter();
    while let Some(o) = opts.next() {
        let v = opts.next().ok_or_else(syntax)?;
        match String::from_utf8_lossy(o).to_ascii_uppercase().as_str() {
            "MATCH" => pattern = Some(v.clone()),
            "COUNT" => {
                let c = int(v)?;
                if c < 1 {
                    return Err(syntax());
                }
                count = usize::try_from(c).unwrap_or(usize::MAX);
            }
            "TYPE" => kind = Some(v.clone()),
            _ => return Err(syntax()),
        }
    }
    Ok(Command::Scan { cursor, pattern, count, kind })
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`: at most one option.
fn parse_getex(rest: &[Bytes]) -> Result<Command, Reply> {
    let key = rest[0].clone();
    let opt = match rest.get(1) {
        None => return Ok(Command::GetEx(key, GetExpiry::Keep)),
        Some(o) => String::from_utf8_lossy(o).to_ascii_uppercase(),
    };
    let e = match (opt.as_str(), rest.len()) {
        ("PERSIST", 2) => GetExpiry::Persist,
        ("EX" | "PX" | "EXAT" | "PXAT", 3) => {
            let unit = if opt.starts_with('E') { 1000 } else { 1 };
            let ms = expire_ms(&rest[2], unit, "getex")?;
            GetExpiry::Set(if opt.ends_with("AT") { Expiry::At(ms) } else { Expiry::In(ms) })
        }
        _ => return Err(syntax()),
    };
    Ok(Command::GetEx(key, e))
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
    fn redis_compatibility_commands_parse_as_redis_reads_them() {
        let b = |w: &str| Bytes::copy_from_slice(w.as_bytes());
        assert_eq!(p(&["multi"]).unwrap(), Command::Multi);
        assert_eq!(p(&["EXEC"]).unwrap(), Command::Exec);
        assert_eq!(p(&["discard"]).unwrap(), Command::Discard);
        assert_eq!(p(&["WATCH", "a", "b"]).unwrap(), Command::Watch);
        assert_eq!(p(&["UNWATCH"]).unwrap(), Command::Unwatch);
        assert_eq!(p(&["SCAN", "0"]).unwrap(), Command::Scan { cursor: 0, pattern: None, count: 10, kind: None });
        assert_eq!(
            p(&["scan", "42", "match", "k*", "COUNT", "500", "TYPE", "string", "COUNT", "7"]).unwrap(),
            Command::Scan { cursor: 42, pattern: Some(b("k*")), count: 7, kind: Some(b("string")) }
        );
        assert_eq!(p(&["KEYS", "*"]).unwrap(), Command::Keys(b("*")));
        assert_eq!(p(&["TYPE", "k"]).unwrap(), Command::Type(b("k")));
        assert_eq!(p(&["GETDEL", "k"]).unwrap(), Command::GetDel(b("k")));
        assert_eq!(p(&["GETEX", "k"]).unwrap(), Command::GetEx(b("k"), GetExpiry::Keep));
        assert_eq!(p(&["GETEX", "k", "persist"]).unwrap(), Command::GetEx(b("k"), GetExpiry::Persist));
        assert_eq!(p(&["GETEX", "k", "EX", "3"]).unwrap(), Command::GetEx(b("k"), GetExpiry::Set(Expiry::In(3000))));
        assert_eq!(p(&["GETEX", "k", "PXAT", "9"]).unwrap(), Command::GetEx(b("k"), GetExpiry::Set(Expiry::At(9))));
        assert!(matches!(
            p(&["SETEX", "k", "5", "v"]).unwrap(),
            Command::Set { expiry: Expiry::In(5000), nx: false, xx: false, get: false, .. }
        ));
        assert!(matches!(p(&["PSETEX", "k", "5", "v"]).unwrap(), Command::Set { expiry: Expiry::In(5), .. }));
        assert_eq!(p(&["EXPIRE", "k", "-3"]).unwrap(), Command::Expire(b("k"), ExpireAt::In(-3000)));
        assert_eq!(p(&["PEXPIREAT", "k", "77"]).unwrap(), Command::Expire(b("k"), ExpireAt::At(77)));
        assert_eq!(p(&["EXPIREAT", "k", "2"]).unwrap(), Command::Expire(b("k"), ExpireAt::At(2000)));
        assert_eq!(p(&["PERSIST", "k"]).unwrap(), Command::Expire(b("k"), ExpireAt::Never));
        assert_eq!(p(&["CONFIG", "GET", "max*", "save"]).unwrap(), Command::ConfigGet(vec![b("max*"), b("save")]));
        assert_eq!(
            p(&["config", "set", "maxmemory", "1"]).unwrap(),
            Command::ConfigRefused("SET".into(), Some(b("maxmemory")))
        );
        assert_eq!(p(&["CONFIG", "RESETSTAT"]).unwrap(), Command::ConfigRefused("RESETSTAT".into(), None));
        assert_eq!(p(&["INFO", "keyspace"]).unwrap(), Command::Info(vec![b("keyspace")]));
    }

    #[test]
    fn mistakes_in_the_new_commands_get_redis_errors() {
        let err = |w: &[&str]| match p(w) {
            Err(Reply::Error(e)) => e,
            other => panic!("{w:?}: {other:?}"),
        };
        assert_eq!(err(&["MULTI", "x"]), "ERR wrong number of arguments for 'multi' command");
        assert_eq!(err(&["WATCH"]), "ERR wrong number of arguments for 'watch' command");
        assert_eq!(err(&["SCAN", "x"]), "ERR invalid cursor");
        assert_eq!(err(&["SCAN", "-1"]), "ERR invalid cursor");
        assert_eq!(err(&["SCAN", "0", "COUNT", "0"]), "ERR syntax error");
        assert_eq!(err(&["SCAN", "0", "COUNT", "x"]), "ERR value is not an integer or out of range");
        assert_eq!(err(&["SCAN", "0", "MATCH"]), "ERR syntax error");
        assert_eq!(err(&["SCAN", "0", "BOGUS", "1"]), "ERR syntax error");
        assert_eq!(err(&["KEYS"]), "ERR wrong number of arguments for 'keys' command");
        assert_eq!(err(&["SETEX", "k", "0", "v"]), "ERR invalid expire time in 'setex' command");
        assert_eq!(err(&["PSETEX", "k", "-1", "v"]), "ERR invalid expire time in 'psetex' command");
        assert_eq!(err(&["SETEX", "k", "1"]), "ERR wrong number of arguments for 'setex' command");
        assert_eq!(err(&["GETEX", "k", "EX"]), "ERR syntax error");
        assert_eq!(err(&["GETEX", "k", "EX", "0"]), "ERR invalid expire time in 'getex' command");
        assert_eq!(err(&["GETEX", "k", "PERSIST", "EX", "1"]), "ERR syntax error");
        assert_eq!(err(&["EXPIRE", "k", "99999999999999999"]), "ERR invalid expire time in 'expire' command");
        assert_eq!(err(&["CONFIG", "SET", "maxmemory"]), "ERR wrong number of arguments for 'config|set' command");
        assert!(err(&["CONFIG", "BOGUS"]).starts_with("ERR unknown subcommand 'BOGUS'"));
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
