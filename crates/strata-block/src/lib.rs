//! The block-device contract between strata's front ends and its stores.
//!
//! The NVMe/TCP target serves namespaces; a namespace is anything that
//! implements [`BlockDevice`]. The node store's volumes implement it today,
//! the pool's replicated volumes will tomorrow. This crate holds only that
//! contract and the buffer type that crosses it, so that the target knows
//! nothing of where blocks live and the stores know nothing of the network.
//!
//! ```
//! use strata_block::{BlockDevice, IoBuf, MemDevice};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = MemDevice::new(4096, 16);
//! let mut buf = IoBuf::zeroed(4096);
//! buf.as_mut_slice().fill(7);
//! let (buf, res) = block_on(dev.write(3, buf, false));
//! res?;
//! let (back, res) = block_on(dev.read(3, IoBuf::zeroed(4096)));
//! res?;
//! assert_eq!(back.as_slice(), buf.as_slice());
//! # Ok(()) }
//! // MemDevice completes on first poll; real code awaits on a runtime.
//! fn block_on<F: std::future::Future>(f: F) -> F::Output {
//!     let mut f = std::pin::pin!(f);
//!     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//!     loop {
//!         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
//!             return v;
//!         }
//!     }
//! }
//! ```

mod buf;
mod device;
pub mod duration;
pub mod fence;
pub mod lend;
mod mem;
pub mod note;
mod region;
pub mod size;
pub mod undo;

pub use buf::{IO_ALIGN, IoBuf, POISON};
pub use device::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, blocks_in, check_range};
pub use duration::{DurationError, format_duration, parse_duration, parse_duration_or_secs};
pub use fence::{ANONYMOUS, EpochFence, FenceGuard, MAX_PROMISE, Refused, Sender, Stale, sender_id};
pub use lend::{Lender, Lent, ReadData};
pub use mem::MemDevice;
pub use note::{MemNoteStore, NoteStore};
pub use region::Region;
pub use size::{SizeError, format_size, parse_size};
pub use undo::{UndoLog, UndoRecord};
