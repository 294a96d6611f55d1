//! A request's way from its arguments to its reply, and a connection's
//! transaction: `MULTI`, `EXEC`, `DISCARD`, with Redis's semantics.
//!
//! - Outside a transaction a command is parsed, checked against the
//!   connection's rights ([`refusal`]) and run while holding the server's
//!   gate for reading.
//! - `MULTI` starts queueing. Each command after it is parsed and checked
//!   at once and queued (`+QUEUED`); one that fails (unknown, wrong
//!   arity, a bad option, refused, or past the queue's bounds) is
//!   answered with its error and marks the transaction aborted, so that
//!   `EXEC` answers `-EXECABORT` and runs none of it: an unsupported
//!   command is refused before anything of its transaction runs.
//! - `EXEC` runs the queue holding the gate for writing: commands of
//!   other connections that are running finish first, and none starts
//!   until the transaction is done, so no other client's command comes
//!   between its commands (the isolation Redis gets from one thread).
//!   It answers an array of the commands' replies; a command that fails
//!   as it runs (`OOM`, say) has its error in the array and the others
//!   still run, as in Redis: there is no rollback.
//! - `DISCARD` drops the queue. `MULTI` inside `MULTI`, and `EXEC` or
//!   `DISCARD` outside, get Redis's errors (the first leaves the
//!   transaction as it was).
//! - `WATCH` is refused (no optimistic locking); inside `MULTI` that
//!   aborts the transaction, as Redis's errors there do. `UNWATCH`
//!   answers `OK`: nothing is ever watched. `QUIT` and `RESET` run at
//!   once, even inside `MULTI` (`RESET` drops the transaction).
//!
//! The queue holds the commands' arguments (shared with the receive
//! buffer they arrived in), at most [`MAX_QUEUED`] commands and
//! [`MAX_QUEUED_BYTES`] of arguments per connection.

use bytes::Bytes;

use super::exec::{exec, refusal};
use super::{Conn, Shared};
use crate::command::Command;
use crate::resp::Reply;

/// The most commands a transaction queues.
pub const MAX_QUEUED: usize = 100_000;

/// The most argument bytes a transaction queues (its values, mostly).
pub const MAX_QUEUED_BYTES: usize = 1 << 30;

/// A connection's transaction in progress (after `MULTI`).
#[derive(Debug, Default)]
pub(super) struct Txn {
    queue: Vec<Command>,
    bytes: usize,
    /// A command failed to queue: `EXEC` runs nothing.
    aborted: bool,
}

/// Answers one request of `conn`: runs it, queues it, or runs the
/// queue (the module doc).
pub(super) async fn handle(shared: &Shared, conn: &mut Conn, args: Vec<Bytes>) -> Reply {
    let bytes = args.iter().map(Bytes::len).sum::<usize>();
    let parsed = Command::parse(args);
    let Some(txn) = conn.txn.as_mut() else {
        let cmd = match parsed {
            Ok(cmd) => cmd,
            Err(e) => return e,
        };
        if let Some(no) = refusal(conn, &cmd) {
            return no;
        }
        return match cmd {
            Command::Multi => {
                conn.txn = Some(Txn::default());
                Reply::Ok
            }
            Command::Exec => Reply::err("EXEC without MULTI"),
            Command::Discard => Reply::err("DISCARD without MULTI"),
            cmd => {
                let _running = shared.gate.read().await;
                exec(shared, conn, cmd).await
            }
        };
    };
    let cmd = match parsed {
        Ok(cmd) => cmd,
        Err(e) => {
            txn.aborted = true;
            return e;
        }
    };
    match cmd {
        Command::Multi => Reply::err("MULTI calls can not be nested"),
        Command::Discard => {
            conn.txn = None;
            Reply::Ok
        }
        Command::Exec => {
            let txn = conn.txn.take().unwrap_or_default();
            if txn.aborted {
                return Reply::Error("EXECABORT Transaction discarded because of previous errors.".into());
            }
            let _alone = shared.gate.write().await;
            let mut replies = Vec::with_capacity(txn.queue.len());
            for cmd in txn.queue {
                replies.push(exec(shared, conn, cmd).await);
            }
            Reply::Array(replies)
        }
        Command::Watch => {
            txn.aborted = true;
            Reply::err("WATCH inside MULTI is not allowed")
        }
        cmd @ (Command::Quit | Command::Reset) => exec(shared, conn, cmd).await,
        cmd => {
            if let Some(no) = refusal(conn, &cmd) {
                if let Some(txn) = conn.txn.as_mut() {
                    txn.aborted = true;
                }
                return no;
            }
            let Some(txn) = conn.txn.as_mut() else { return Reply::err("no transaction") };
            if txn.queue.len() >= MAX_QUEUED || txn.bytes + bytes > MAX_QUEUED_BYTES {
                txn.aborted = true;
                return Reply::err(format!(
                    "transaction too large: at most {MAX_QUEUED} commands and {MAX_QUEUED_BYTES} bytes of \
                     arguments are queued"
                ));
            }
            txn.bytes += bytes;
            txn.queue.push(cmd);
            Reply::Simple("QUEUED".into())
        }
    }
}
