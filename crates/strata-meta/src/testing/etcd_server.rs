//! [`EtcdServer`]: what a test needs of an etcd, so that one test body
//! runs against a real etcd ([`EtcdProcess`]) and the in-process fake
//! ([`FakeEtcd`]) alike. Each method does what the same-named inherent
//! method of both types does.

use super::{EtcdProcess, FakeEtcd};
use crate::etcd::{EtcdClient, EtcdConfig};

/// An etcd a test can talk to and break. See the module docs.
pub trait EtcdServer {
    /// The client URL, `http://127.0.0.1:PORT`.
    fn url(&self) -> String;
    /// A configuration with the default timeouts.
    fn config(&self) -> EtcdConfig;
    /// A client with the default timeouts.
    fn client(&self) -> EtcdClient {
        EtcdClient::new(self.config())
    }
    /// Stops it as SIGKILL does; the data stays.
    fn kill(&mut self);
    /// Starts it again on the same port and data.
    fn restart(&mut self);
    /// Freezes it as SIGSTOP does.
    fn pause(&self);
    /// Undoes [`pause`](Self::pause).
    fn resume(&self);
}

macro_rules! delegate {
    ($t:ty) => {
        impl EtcdServer for $t {
            fn url(&self) -> String {
                <$t>::url(self)
            }
            fn config(&self) -> EtcdConfig {
                <$t>::config(self)
            }
            fn kill(&mut self) {
                <$t>::kill(self)
            }
            fn restart(&mut self) {
                <$t>::restart(self)
            }
            fn pause(&self) {
                <$t>::pause(self)
            }
            fn resume(&self) {
                <$t>::resume(self)
            }
        }
    };
}

delegate!(EtcdProcess);
delegate!(FakeEtcd);

/// Runs the async test body `$name(etcd: impl EtcdServer)` twice: as the
/// test `$name::real` on an [`EtcdProcess`] and as `$name::fake` on a
/// [`FakeEtcd`]. Arguments after the name go to `#[tokio::test(..)]`.
/// The calling crate needs `tokio` (with `macros`) as a dependency.
#[macro_export]
macro_rules! on_both_etcds {
    ($name:ident $(, $($arg:tt)*)?) => {
        mod $name {
            #[tokio::test($($($arg)*)?)]
            async fn real() {
                super::$name($crate::testing::EtcdProcess::start()).await;
            }

            #[tokio::test($($($arg)*)?)]
            async fn fake() {
                super::$name($crate::testing::FakeEtcd::start()).await;
            }
        }
    };
}
