//! strata's user-space NVMe/TCP initiator (being written).
