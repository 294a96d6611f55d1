//! The structures a host decodes from a controller: Identify data, log
//! pages (the ANA log among them), discovery log, Connect data, an owner's note a replica's node
//! returns (its layout, and the dirty-region log inside), and the lists
//! of the undo commands (a shard's records; the updates a Roll Back Only
//! names, which the controller decodes the same way), a Reservation
//! Report and a Reservation Notification page, and the reservation state
//! a target keeps in its metadata store. Invariants:
//! never panic; what decodes re-encodes to something that decodes to the
//! same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_nvme::command::fenced;
use strata_nvme::fabrics::ConnectData;
use strata_pool::{DrlState, Regions};
use strata_nvme::identify::{self, IdentifyController, IdentifyNamespace};
use strata_nvme::log_page;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = strata_nvme::reservation::ReservationStatus::decode(data) {
        let len = 64 + 64 * s.registrants.len();
        assert_eq!(strata_nvme::reservation::ReservationStatus::decode(&s.encode(len)).as_ref(), Ok(&s));
    }
    if let Ok(n) = strata_nvme::reservation::ReservationNotice::decode(data) {
        assert_eq!(strata_nvme::reservation::ReservationNotice::decode(&n.encode()), Ok(n));
    }
    if let Ok(r) = strata_target::reservation::Reservations::from_bytes(data) {
        assert_eq!(strata_target::reservation::Reservations::from_bytes(&r.to_bytes()).as_ref(), Ok(&r));
    }
    if let Ok(c) = IdentifyController::decode(data) {
        assert_eq!(IdentifyController::decode(&c.encode()).ok(), Some(c));
    }
    if let Ok(n) = IdentifyNamespace::decode(data) {
        assert_eq!(IdentifyNamespace::decode(&n.encode()).ok(), Some(n));
    }
    let _ = identify::decode_active_ns_list(data);
    let _ = identify::decode_ns_id_descriptors(data);
    let _ = log_page::decode_changed_ns_list(data);
    let _ = log_page::SmartLog::decode(data);
    let _ = log_page::ErrorLogEntry::decode(data);
    if let Ok(ana) = log_page::AnaLog::decode(data) {
        assert_eq!(log_page::AnaLog::decode(&ana.encode(false)).as_ref(), Ok(&ana));
    }
    if let Ok((h, entries)) = log_page::decode_discovery_log(data) {
        assert!(entries.len() as u64 <= h.numrec);
    }
    if let Ok(c) = ConnectData::decode(data) {
        assert_eq!(ConnectData::decode(&c.encode()), Ok(c));
    }
    if let Ok(note) = fenced::decode_note(data) {
        assert!(note.len() <= fenced::MAX_NOTE);
        let wire = fenced::encode_note(note, 512).expect("a note that decoded fits");
        assert_eq!(fenced::decode_note(&wire), Ok(note));
    }
    for width in [1, 3] {
        if let Ok(values) = fenced::decode_list(data, width) {
            assert!(values.len() / width <= fenced::MAX_LIST && values.len() % width == 0);
            let wire = fenced::encode_list(&values, width, 512).expect("a list that decoded fits");
            assert_eq!(fenced::decode_list(&wire, width), Ok(values));
        }
    }
    // A note holds a dirty-region log; volumes of a few region counts.
    for span in [4u64 << 20, 1 << 30, 1 << 40] {
        let regions = Regions::for_volume(span, 64 << 20);
        if let Ok(s) = DrlState::decode(data, regions) {
            assert_eq!(DrlState::decode(&s.encode(regions), regions).ok(), Some(s));
        }
        if let Ok((stamp, s)) = DrlState::decode_stamped(data, regions) {
            let again = DrlState::decode_stamped(&s.encode_stamped(stamp, regions), regions);
            assert_eq!(again.ok(), Some((stamp, s)));
        }
    }
});
