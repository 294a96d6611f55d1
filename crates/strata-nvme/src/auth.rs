//! In-band authentication: the Authentication Send / Receive fabrics
//! commands and the DH-HMAC-CHAP messages they carry (NVMe Base 2.0,
//! sections 5.2 / 5.3 of NVMe-oF 1.1 and 8.13.5; Linux
//! `include/linux/nvme.h`, `struct nvmf_auth_*`).
//!
//! Authentication Send (FCTYPE 05h, host to controller) and Receive
//! (FCTYPE 06h, controller to host) share one entry layout:
//!
//! | SQE offset | size | field                                        |
//! |------------|------|----------------------------------------------|
//! | 41         | 1    | SPSP0: security protocol specific (01h)      |
//! | 42         | 1    | SPSP1 (01h)                                  |
//! | 43         | 1    | SECP: security protocol (E9h, DH-HMAC-CHAP)  |
//! | 44         | 4    | TL (Send) / AL (Receive): data length        |
//!
//! Every message starts with the same six bytes: AUTH_TYPE (00h common,
//! 01h DH-HMAC-CHAP) at 0, AUTH_ID (the message) at 1, T_ID (the
//! transaction) at 4. The rest, by message:
//!
//! | message    | offset | size | field                                    |
//! |------------|--------|------|------------------------------------------|
//! | Negotiate  | 6      | 1    | SC_C: secure channel concatenation       |
//! |            | 7      | 1    | NAPD: number of protocol descriptors     |
//! |            | 8      | 64*n | descriptors: AUTHID 0, HALEN 2, DHLEN 3, |
//! |            |        |      | hash IDs at 4, DH group IDs at 34        |
//! | Challenge  | 6      | 1    | HL: hash length                          |
//! |            | 8      | 1    | HASHID                                   |
//! |            | 9      | 1    | DHGID                                    |
//! |            | 10     | 2    | DHVLEN                                   |
//! |            | 12     | 4    | SEQNUM                                   |
//! |            | 16     | HL   | C1, then DHVLEN bytes of DH value        |
//! | Reply      | 6      | 1    | HL                                       |
//! |            | 8      | 1    | CVALID: bit 0, C2 is valid               |
//! |            | 10     | 2    | DHVLEN                                   |
//! |            | 12     | 4    | SEQNUM (S2)                              |
//! |            | 16     | HL   | response, HL of C2, DHVLEN of DH value   |
//! | Success1   | 6      | 1    | HL                                       |
//! |            | 8      | 1    | RVALID: bit 0, the response is valid     |
//! |            | 16     | HL   | the controller's response                |
//! | Success2   |        |      | 16 bytes, T_ID only                      |
//! | Failure1/2 | 6      | 1    | RESCODE (01h: failed)                    |
//! |            | 7      | 1    | RESCODE_EXP: the explanation             |

use crate::codec::{get_u16, get_u32, put_u16, put_u32};
use crate::command::Sqe;
use crate::fabrics::{FABRICS_OPCODE, fctype};

/// SECP of DH-HMAC-CHAP.
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;
/// Offset of SPSP0 in an Authentication Send / Receive entry.
pub const SPSP0_OFFSET: usize = 41;
/// Offset of SPSP1.
pub const SPSP1_OFFSET: usize = 42;
/// Offset of SECP.
pub const SECP_OFFSET: usize = 43;
/// Offset of TL (Send) or AL (Receive).
pub const LEN_OFFSET: usize = 44;

/// AUTH_TYPE values.
pub mod auth_type {
    /// Common messages (Negotiate, Failure1/2).
    pub const COMMON: u8 = 0x00;
    /// DH-HMAC-CHAP messages.
    pub const DHCHAP: u8 = 0x01;
}

/// AUTH_ID values: which message.
pub mod auth_id {
    /// Host: the protocols and parameters it can use.
    pub const NEGOTIATE: u8 = 0x00;
    /// Controller: hash, group, C1, its DH value.
    pub const CHALLENGE: u8 = 0x01;
    /// Host: its response, optionally C2 for the controller.
    pub const REPLY: u8 = 0x02;
    /// Controller: the host is authenticated, with its own response.
    pub const SUCCESS1: u8 = 0x03;
    /// Host: the controller is authenticated.
    pub const SUCCESS2: u8 = 0x04;
    /// Host: the controller failed.
    pub const FAILURE2: u8 = 0xF0;
    /// Controller: the host failed.
    pub const FAILURE1: u8 = 0xF1;
}

/// RESCODE_EXP values of a Failure message.
pub mod failure {
    /// Authentication failed (wrong response).
    pub const FAILED: u8 = 0x01;
    /// The protocol is not usable.
    pub const NOT_USABLE: u8 = 0x02;
    /// Secure channel concatenation mismatch.
    pub const CONCAT_MISMATCH: u8 = 0x03;
    /// No hash function in common.
    pub const HASH_UNUSABLE: u8 = 0x04;
    /// No DH group in common.
    pub const DHGROUP_UNUSABLE: u8 = 0x05;
    /// The message's payload is malformed.
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    /// The message is not the one expected now.
    pub const INCORRECT_MESSAGE: u8 = 0x07;
}

/// RESCODE of every Failure message: authentication failed.
pub const RESCODE_FAILED: u8 = 0x01;
/// AUTHID of a DH-HMAC-CHAP protocol descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;

/// Size of the common header of Negotiate and Failure messages.
pub const SHORT_HEADER_LEN: usize = 8;
/// Size of the header of Challenge, Reply, Success1 and Success2.
pub const HEADER_LEN: usize = 16;
/// Size of one protocol descriptor in a Negotiate message.
pub const DESCRIPTOR_LEN: usize = 64;
/// Offset of the DH group IDs in a descriptor's ID list.
pub const DESCRIPTOR_DH_IDS_OFFSET: usize = 34;
/// Most IDs of one kind in a descriptor.
pub const DESCRIPTOR_MAX_IDS: usize = 30;
/// Offset of T_ID in every message.
pub const T_ID_OFFSET: usize = 4;

/// The fields of an Authentication Send or Receive entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthCmd {
    /// SECP.
    pub secp: u8,
    /// SPSP0.
    pub spsp0: u8,
    /// SPSP1.
    pub spsp1: u8,
    /// TL or AL.
    pub len: u32,
}

impl AuthCmd {
    /// The fields for DH-HMAC-CHAP with `len` bytes of data.
    pub fn dhchap(len: u32) -> AuthCmd {
        AuthCmd { secp: SECP_DHCHAP, spsp0: SPSP_DHCHAP, spsp1: SPSP_DHCHAP, len }
    }

    /// Reads the fields of `sqe`.
    pub fn decode(sqe: &Sqe) -> AuthCmd {
        let b = sqe.bytes();
        AuthCmd { secp: b[SECP_OFFSET], spsp0: b[SPSP0_OFFSET], spsp1: b[SPSP1_OFFSET], len: get_u32(b, LEN_OFFSET) }
    }

    /// Writes these fields, the fabrics opcode and `fctype` (Send or
    /// Receive) into `sqe`.
    pub fn encode(&self, sqe: &mut Sqe, fctype: u8) {
        sqe.bytes_mut()[0] = FABRICS_OPCODE;
        sqe.set_fctype(fctype);
        let b = sqe.bytes_mut();
        b[SECP_OFFSET] = self.secp;
        b[SPSP0_OFFSET] = self.spsp0;
        b[SPSP1_OFFSET] = self.spsp1;
        put_u32(b, LEN_OFFSET, self.len);
    }

    /// The offset of the first field that is not DH-HMAC-CHAP's or a zero
    /// length, for an Invalid Field status; `None` when all are right.
    pub fn invalid_field(&self) -> Option<usize> {
        if self.secp != SECP_DHCHAP {
            Some(SECP_OFFSET)
        } else if self.spsp0 != SPSP_DHCHAP {
            Some(SPSP0_OFFSET)
        } else if self.spsp1 != SPSP_DHCHAP {
            Some(SPSP1_OFFSET)
        } else if self.len == 0 {
            Some(LEN_OFFSET)
        } else {
            None
        }
    }
}

/// True for an Authentication Send or Receive entry.
pub fn is_auth(sqe: &Sqe) -> bool {
    sqe.opcode() == FABRICS_OPCODE && matches!(sqe.fctype(), fctype::AUTH_SEND | fctype::AUTH_RECEIVE)
}

/// Why a message does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthMessageError {
    /// Shorter than its header or than the lengths it declares.
    #[error("authentication message of {got} bytes, {need} needed")]
    Short {
        /// Bytes present.
        got: usize,
        /// Bytes its header or lengths call for.
        need: usize,
    },
    /// An AUTH_TYPE / AUTH_ID pair that names no message.
    #[error("unknown authentication message: type {auth_type:#04x} id {auth_id:#04x}")]
    Unknown {
        /// AUTH_TYPE.
        auth_type: u8,
        /// AUTH_ID.
        auth_id: u8,
    },
    /// A descriptor lists more IDs than it has room for.
    #[error("negotiate descriptor {index} lists {halen} hash and {dhlen} DH group IDs (30 each at most)")]
    TooManyIds {
        /// Which descriptor.
        index: usize,
        /// HALEN.
        halen: u8,
        /// DHLEN.
        dhlen: u8,
    },
}

/// One protocol descriptor of a Negotiate message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    /// AUTHID: 01h for DH-HMAC-CHAP.
    pub authid: u8,
    /// Hash function IDs the host can use.
    pub hashes: Vec<u8>,
    /// DH group IDs the host can use.
    pub dhgroups: Vec<u8>,
}

/// An authentication message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMessage {
    /// Host to controller: what it can use.
    Negotiate {
        /// Transaction ID.
        t_id: u16,
        /// Secure channel concatenation asked for.
        sc_c: u8,
        /// The protocol descriptors (NAPD of them).
        protocols: Vec<Protocol>,
    },
    /// Controller to host: the challenge.
    Challenge {
        /// Transaction ID.
        t_id: u16,
        /// The hash chosen.
        hash_id: u8,
        /// The DH group chosen.
        dh_group: u8,
        /// S1.
        seqnum: u32,
        /// C1 (HL bytes).
        challenge: Vec<u8>,
        /// The controller's DH public value (empty for the NULL group).
        dh_value: Vec<u8>,
    },
    /// Host to controller: the response.
    Reply {
        /// Transaction ID.
        t_id: u16,
        /// The host's response (HL bytes).
        response: Vec<u8>,
        /// C2, when the host asks the controller to authenticate too.
        challenge: Option<Vec<u8>>,
        /// S2.
        seqnum: u32,
        /// The host's DH public value (empty for the NULL group).
        dh_value: Vec<u8>,
    },
    /// Controller to host: the host is authenticated.
    Success1 {
        /// Transaction ID.
        t_id: u16,
        /// HL, also when no response is carried.
        hash_len: u8,
        /// The controller's response to C2, when asked for.
        response: Option<Vec<u8>>,
    },
    /// Host to controller: the controller is authenticated.
    Success2 {
        /// Transaction ID.
        t_id: u16,
    },
    /// Either way: authentication failed.
    Failure {
        /// Failure1 (from the controller) or Failure2 (from the host).
        auth_id: u8,
        /// Transaction ID.
        t_id: u16,
        /// RESCODE.
        rescode: u8,
        /// RESCODE_EXP, one of [`failure`].
        explanation: u8,
    },
}

fn need(b: &[u8], n: usize) -> Result<(), AuthMessageError> {
    if b.len() < n { Err(AuthMessageError::Short { got: b.len(), need: n }) } else { Ok(()) }
}

impl AuthMessage {
    /// The message's transaction ID.
    pub fn t_id(&self) -> u16 {
        match self {
            AuthMessage::Negotiate { t_id, .. }
            | AuthMessage::Challenge { t_id, .. }
            | AuthMessage::Reply { t_id, .. }
            | AuthMessage::Success1 { t_id, .. }
            | AuthMessage::Success2 { t_id }
            | AuthMessage::Failure { t_id, .. } => *t_id,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            AuthMessage::Negotiate { .. } => "Negotiate",
            AuthMessage::Challenge { .. } => "Challenge",
            AuthMessage::Reply { .. } => "Reply",
            AuthMessage::Success1 { .. } => "Success1",
            AuthMessage::Success2 { .. } => "Success2",
            AuthMessage::Failure { auth_id: auth_id::FAILURE1, .. } => "Failure1",
            AuthMessage::Failure { .. } => "Failure2",
        }
    }

    /// Decodes a message; bytes after the lengths it declares are ignored.
    pub fn decode(b: &[u8]) -> Result<AuthMessage, AuthMessageError> {
        need(b, SHORT_HEADER_LEN)?;
        let (ty, id, t_id) = (b[0], b[1], get_u16(b, T_ID_OFFSET));
        match (ty, id) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => {
                let napd = usize::from(b[7]);
                need(b, SHORT_HEADER_LEN + napd * DESCRIPTOR_LEN)?;
                let mut protocols = Vec::with_capacity(napd);
                for index in 0..napd {
                    let d = &b[SHORT_HEADER_LEN + index * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN];
                    let (halen, dhlen) = (d[2], d[3]);
                    if usize::from(halen) > DESCRIPTOR_MAX_IDS || usize::from(dhlen) > DESCRIPTOR_MAX_IDS {
                        return Err(AuthMessageError::TooManyIds { index, halen, dhlen });
                    }
                    protocols.push(Protocol {
                        authid: d[0],
                        hashes: d[4..4 + usize::from(halen)].to_vec(),
                        dhgroups: d[DESCRIPTOR_DH_IDS_OFFSET..DESCRIPTOR_DH_IDS_OFFSET + usize::from(dhlen)].to_vec(),
                    });
                }
                Ok(AuthMessage::Negotiate { t_id, sc_c: b[6], protocols })
            }
            (auth_type::COMMON | auth_type::DHCHAP, auth_id::FAILURE1 | auth_id::FAILURE2) => {
                Ok(AuthMessage::Failure { auth_id: id, t_id, rescode: b[6], explanation: b[7] })
            }
            (auth_type::DHCHAP, auth_id::CHALLENGE) => {
                need(b, HEADER_LEN)?;
                let (hl, dhvlen) = (usize::from(b[6]), usize::from(get_u16(b, 10)));
                need(b, HEADER_LEN + hl + dhvlen)?;
                Ok(AuthMessage::Challenge {
                    t_id,
                    hash_id: b[8],
                    dh_group: b[9],
                    seqnum: get_u32(b, 12),
                    challenge: b[HEADER_LEN..HEADER_LEN + hl].to_vec(),
                    dh_value: b[HEADER_LEN + hl..HEADER_LEN + hl + dhvlen].to_vec(),
                })
            }
            (auth_type::DHCHAP, auth_id::REPLY) => {
                need(b, HEADER_LEN)?;
                let (hl, dhvlen) = (usize::from(b[6]), usize::from(get_u16(b, 10)));
                need(b, HEADER_LEN + 2 * hl + dhvlen)?;
                let r = &b[HEADER_LEN..];
                Ok(AuthMessage::Reply {
                    t_id,
                    response: r[..hl].to_vec(),
                    challenge: (b[8] & 1 != 0).then(|| r[hl..2 * hl].to_vec()),
                    seqnum: get_u32(b, 12),
                    dh_value: r[2 * hl..2 * hl + dhvlen].to_vec(),
                })
            }
            (auth_type::DHCHAP, auth_id::SUCCESS1) => {
                need(b, HEADER_LEN)?;
                let hl = usize::from(b[6]);
                let response = if b[8] & 1 != 0 {
                    need(b, HEADER_LEN + hl)?;
                    Some(b[HEADER_LEN..HEADER_LEN + hl].to_vec())
                } else {
                    None
                };
                Ok(AuthMessage::Success1 { t_id, hash_len: b[6], response })
            }
            (auth_type::DHCHAP, auth_id::SUCCESS2) => Ok(AuthMessage::Success2 { t_id }),
            (auth_type, auth_id) => Err(AuthMessageError::Unknown { auth_type, auth_id }),
        }
    }

    /// Encodes the message. Lengths that do not fit their fields (HL over
    /// 255 bytes, a DH value over 65535) are the caller's bug; they are
    /// cut to the field.
    pub fn encode(&self) -> Vec<u8> {
        let mut b;
        match self {
            AuthMessage::Negotiate { t_id, sc_c, protocols } => {
                b = vec![0; SHORT_HEADER_LEN + protocols.len() * DESCRIPTOR_LEN];
                b[0] = auth_type::COMMON;
                b[1] = auth_id::NEGOTIATE;
                put_u16(&mut b, T_ID_OFFSET, *t_id);
                b[6] = *sc_c;
                b[7] = protocols.len() as u8;
                for (i, p) in protocols.iter().enumerate() {
                    let d = &mut b[SHORT_HEADER_LEN + i * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN];
                    let hashes = &p.hashes[..p.hashes.len().min(DESCRIPTOR_MAX_IDS)];
                    let groups = &p.dhgroups[..p.dhgroups.len().min(DESCRIPTOR_MAX_IDS)];
                    d[0] = p.authid;
                    d[2] = hashes.len() as u8;
                    d[3] = groups.len() as u8;
                    d[4..4 + hashes.len()].copy_from_slice(hashes);
                    d[DESCRIPTOR_DH_IDS_OFFSET..DESCRIPTOR_DH_IDS_OFFSET + groups.len()].copy_from_slice(groups);
                }
            }
            AuthMessage::Challenge { t_id, hash_id, dh_group, seqnum, challenge, dh_value } => {
                b = header(auth_id::CHALLENGE, *t_id, challenge.len() + dh_value.len());
                b[6] = challenge.len() as u8;
                b[8] = *hash_id;
                b[9] = *dh_group;
                put_u16(&mut b, 10, dh_value.len() as u16);
                put_u32(&mut b, 12, *seqnum);
                b[HEADER_LEN..].copy_from_slice(&[challenge.as_slice(), dh_value].concat());
            }
            AuthMessage::Reply { t_id, response, challenge, seqnum, dh_value } => {
                let hl = response.len();
                b = header(auth_id::REPLY, *t_id, 2 * hl + dh_value.len());
                b[6] = hl as u8;
                b[8] = u8::from(challenge.is_some());
                put_u16(&mut b, 10, dh_value.len() as u16);
                put_u32(&mut b, 12, *seqnum);
                b[HEADER_LEN..HEADER_LEN + hl].copy_from_slice(response);
                if let Some(c) = challenge {
                    let n = c.len().min(hl);
                    b[HEADER_LEN + hl..HEADER_LEN + hl + n].copy_from_slice(&c[..n]);
                }
                b[HEADER_LEN + 2 * hl..].copy_from_slice(dh_value);
            }
            AuthMessage::Success1 { t_id, hash_len, response } => {
                b = header(auth_id::SUCCESS1, *t_id, usize::from(*hash_len));
                b[6] = *hash_len;
                if let Some(r) = response {
                    b[8] = 1;
                    let n = r.len().min(usize::from(*hash_len));
                    b[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&r[..n]);
                }
            }
            AuthMessage::Success2 { t_id } => b = header(auth_id::SUCCESS2, *t_id, 0),
            AuthMessage::Failure { auth_id, t_id, rescode, explanation } => {
                b = vec![0; SHORT_HEADER_LEN];
                b[0] = auth_type::COMMON;
                b[1] = *auth_id;
                put_u16(&mut b, T_ID_OFFSET, *t_id);
                b[6] = *rescode;
                b[7] = *explanation;
            }
        }
        b
    }
}

fn header(id: u8, t_id: u16, body: usize) -> Vec<u8> {
    let mut b = vec![0; HEADER_LEN + body];
    b[0] = auth_type::DHCHAP;
    b[1] = id;
    put_u16(&mut b, T_ID_OFFSET, t_id);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_offsets_match_linux_nvmf_auth_send_command() {
        // struct nvmf_auth_send_command: opcode, resv1, command_id, fctype,
        // resv2[19], dptr (16), resv3, spsp0, spsp1, secp, tl.
        assert_eq!(SPSP0_OFFSET, 1 + 1 + 2 + 1 + 19 + 16 + 1);
        assert_eq!(SECP_OFFSET, SPSP0_OFFSET + 2);
        assert_eq!(LEN_OFFSET, SECP_OFFSET + 1);
        let mut sqe = Sqe::new(0, 1);
        AuthCmd::dhchap(72).encode(&mut sqe, fctype::AUTH_SEND);
        assert!(is_auth(&sqe));
        assert_eq!(sqe.bytes()[43], 0xE9);
        assert_eq!(&sqe.bytes()[44..48], &72u32.to_le_bytes());
        assert_eq!(AuthCmd::decode(&sqe), AuthCmd::dhchap(72));
        assert_eq!(AuthCmd::dhchap(72).invalid_field(), None);
        assert_eq!(AuthCmd { secp: 0xEA, ..AuthCmd::dhchap(1) }.invalid_field(), Some(SECP_OFFSET));
        assert_eq!(AuthCmd::dhchap(0).invalid_field(), Some(LEN_OFFSET));
    }

    /// The Negotiate the Linux host sends (host/auth.c): one descriptor,
    /// SHA-256/384/512 and the NULL group plus all five FFDHE groups.
    #[test]
    fn negotiate_layout_is_linuxs() {
        let m = AuthMessage::Negotiate {
            t_id: 0x1234,
            sc_c: 0,
            protocols: vec![Protocol {
                authid: AUTHID_DHCHAP,
                hashes: vec![1, 2, 3],
                dhgroups: vec![0, 1, 2, 3, 4, 5],
            }],
        };
        let b = m.encode();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 0x34, 0x12, 0, 1]);
        assert_eq!(&b[8..12], &[1, 0, 3, 6]);
        assert_eq!(&b[12..15], &[1, 2, 3]);
        assert_eq!(&b[8 + 4 + 30..8 + 4 + 36], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(AuthMessage::decode(&b), Ok(m));
    }

    #[test]
    fn every_message_round_trips_and_pins_its_offsets() {
        let challenge = AuthMessage::Challenge {
            t_id: 7,
            hash_id: 1,
            dh_group: 1,
            seqnum: 0xAABBCCDD,
            challenge: vec![0x11; 32],
            dh_value: vec![0x22; 256],
        };
        let b = challenge.encode();
        assert_eq!(b.len(), 16 + 32 + 256);
        assert_eq!((b[0], b[1], b[6], b[8], b[9]), (1, 1, 32, 1, 1));
        assert_eq!(&b[10..12], &256u16.to_le_bytes());
        assert_eq!(&b[12..16], &0xAABBCCDDu32.to_le_bytes());
        assert_eq!((b[16], b[48]), (0x11, 0x22));
        assert_eq!(AuthMessage::decode(&b), Ok(challenge));

        let reply = AuthMessage::Reply {
            t_id: 7,
            response: vec![3; 48],
            challenge: Some(vec![4; 48]),
            seqnum: 9,
            dh_value: vec![5; 384],
        };
        let b = reply.encode();
        assert_eq!(b.len(), 16 + 96 + 384);
        assert_eq!((b[1], b[6], b[8], b[16], b[64], b[112]), (2, 48, 1, 3, 4, 5));
        assert_eq!(AuthMessage::decode(&b), Ok(reply));
        // Without C2 the space is there, zeroed, and CVALID is clear.
        let one_way =
            AuthMessage::Reply { t_id: 7, response: vec![3; 32], challenge: None, seqnum: 0, dh_value: vec![] };
        let b = one_way.encode();
        assert_eq!((b.len(), b[8], b[48]), (80, 0, 0));
        assert_eq!(AuthMessage::decode(&b), Ok(one_way));

        for m in [
            AuthMessage::Success1 { t_id: 1, hash_len: 32, response: Some(vec![8; 32]) },
            AuthMessage::Success1 { t_id: 1, hash_len: 64, response: None },
            AuthMessage::Success2 { t_id: 2 },
            AuthMessage::Failure {
                auth_id: auth_id::FAILURE1,
                t_id: 3,
                rescode: RESCODE_FAILED,
                explanation: failure::FAILED,
            },
            AuthMessage::Failure {
                auth_id: auth_id::FAILURE2,
                t_id: 3,
                rescode: RESCODE_FAILED,
                explanation: failure::FAILED,
            },
        ] {
            assert_eq!(AuthMessage::decode(&m.encode()), Ok(m.clone()), "{}", m.name());
        }
        assert_eq!(AuthMessage::Success2 { t_id: 2 }.encode().len(), 16);
        assert_eq!(AuthMessage::Success1 { t_id: 1, hash_len: 48, response: None }.encode().len(), 16 + 48);
        assert_eq!(
            AuthMessage::Failure { auth_id: auth_id::FAILURE1, t_id: 3, rescode: 1, explanation: 7 }.encode(),
            vec![0, 0xF1, 0, 0, 3, 0, 1, 7]
        );
    }

    #[test]
    fn short_and_unknown_messages_are_errors_not_panics() {
        assert!(matches!(AuthMessage::decode(&[0; 7]), Err(AuthMessageError::Short { .. })));
        // A Negotiate claiming two descriptors with room for one.
        let mut b = vec![0u8; 8 + 64];
        b[7] = 2;
        assert_eq!(AuthMessage::decode(&b), Err(AuthMessageError::Short { got: 72, need: 136 }));
        b[7] = 1;
        b[8 + 2] = 31;
        assert!(matches!(AuthMessage::decode(&b), Err(AuthMessageError::TooManyIds { .. })));
        // A Challenge whose lengths overrun the data.
        let mut c = vec![0u8; 16];
        c[0] = 1;
        c[1] = 1;
        c[6] = 32;
        assert!(matches!(AuthMessage::decode(&c), Err(AuthMessageError::Short { .. })));
        assert_eq!(
            AuthMessage::decode(&[9, 9, 0, 0, 0, 0, 0, 0]),
            Err(AuthMessageError::Unknown { auth_type: 9, auth_id: 9 })
        );
    }
}
