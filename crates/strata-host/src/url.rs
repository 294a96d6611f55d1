//! Where a volume is: `tcp://ADDR:PORT[,ADDR:PORT...]/NQN`, the one form
//! every command that connects to a target takes (`strata bench
//! --target`, the KV tier's `--pool`).

use std::net::SocketAddr;

/// A target's subsystem at one address or several (paths to the same
/// subsystem, tried in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// Where to find it: any I/O port of the target, or of any node.
    pub addrs: Vec<SocketAddr>,
    /// The subsystem.
    pub nqn: String,
}

/// A target URL that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetUrlError {
    /// Not `tcp://ADDRS/NQN`, or an empty NQN.
    #[error("{spec:?}: expected tcp://ADDR:PORT[,ADDR:PORT...]/NQN")]
    Shape {
        /// The URL as given.
        spec: String,
    },
    /// One of the addresses is not `IP:PORT`.
    #[error("{spec:?}: address {addr:?}: {reason}")]
    Address {
        /// The URL as given.
        spec: String,
        /// The address that did not parse.
        addr: String,
        /// Why (part of the message, so not a separate source).
        reason: std::net::AddrParseError,
    },
}

impl std::str::FromStr for TargetUrl {
    type Err = TargetUrlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shape = || TargetUrlError::Shape { spec: s.to_string() };
        let rest = s.strip_prefix("tcp://").ok_or_else(shape)?;
        let (addrs, nqn) = rest.split_once('/').ok_or_else(shape)?;
        if nqn.is_empty() {
            return Err(shape());
        }
        let addrs = addrs
            .split(',')
            .map(|a| {
                a.trim().parse().map_err(|reason| TargetUrlError::Address {
                    spec: s.to_string(),
                    addr: a.to_string(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TargetUrl { addrs, nqn: nqn.to_string() })
    }
}

impl std::fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        write!(f, "tcp://{}/{}", addrs.join(","), self.nqn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_take_one_address_or_several_and_print_as_parsed() {
        let one: TargetUrl = "tcp://127.0.0.1:4420/nqn.x".parse().unwrap();
        assert_eq!((one.addrs.len(), one.nqn.as_str()), (1, "nqn.x"));
        let three: TargetUrl = "tcp://10.0.0.1:4420,10.0.0.2:4420,[::1]:4421/nqn.y".parse().unwrap();
        assert_eq!(three.addrs.len(), 3);
        assert_eq!(three.to_string(), "tcp://10.0.0.1:4420,10.0.0.2:4420,[::1]:4421/nqn.y");
        for bad in ["127.0.0.1:4420/nqn", "tcp://127.0.0.1:4420", "tcp://127.0.0.1:4420/", "tcp://a,b/nqn", "tcp:///n"]
        {
            assert!(bad.parse::<TargetUrl>().is_err(), "{bad}");
        }
    }

    /// The messages are the CLI's: they must read the same as before
    /// these errors were shared.
    #[test]
    fn errors_read_as_the_cli_printed_them() {
        let shape = "tcp://127.0.0.1:4420".parse::<TargetUrl>().unwrap_err();
        assert_eq!(shape.to_string(), "\"tcp://127.0.0.1:4420\": expected tcp://ADDR:PORT[,ADDR:PORT...]/NQN");
        let addr = "tcp://a, b/nqn".parse::<TargetUrl>().unwrap_err();
        assert_eq!(addr.to_string(), "\"tcp://a, b/nqn\": address \"a\": invalid socket address syntax");
    }
}
