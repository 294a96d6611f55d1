//! `strata host`: the NVMe hosts a node (or cluster) knows, with their
//! DH-HMAC-CHAP secrets and TLS PSKs, through the API.

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use strata_auth::{DhchapSecret, HashFn, TlsPsk};

use crate::client;

/// Keys a host may be given; each takes a key in the interchange format
/// (as `nvme gen-dhchap-key` / `nvme gen-tls-key` print) or `generate`.
#[derive(Args, Debug, Default)]
pub struct KeyArgs {
    /// The host's DH-HMAC-CHAP secret (DHHC-1:..), or `generate` to make
    /// one and print it. A host with a secret must authenticate.
    #[arg(long, value_name = "KEY")]
    dhchap_secret: Option<String>,
    /// The controller's secret (DHHC-1:..) for a host that authenticates
    /// the controller too (nvme connect --dhchap-ctrl-secret), or `generate`.
    #[arg(long, value_name = "KEY")]
    dhchap_ctrl_secret: Option<String>,
    /// Hash to use when the host offers it: sha256, sha384, sha512.
    #[arg(long, value_name = "HASH")]
    dhchap_hash: Option<String>,
    /// DH group to use when the host offers it: null, ffdhe2048 .. ffdhe8192.
    #[arg(long, value_name = "GROUP")]
    dhchap_dhgroup: Option<String>,
    /// The host's TLS pre-shared key (NVMeTLSkey-1:..), or `generate`.
    #[arg(long, value_name = "KEY")]
    tls_psk: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `strata host ...`.
#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Add a host by NQN, with its keys.
    Add {
        /// The host's NQN (cat /etc/nvme/hostnqn on the host).
        nqn: String,
        #[command(flatten)]
        keys: KeyArgs,
    },
    /// Change a host's keys (rotate): connected hosts stay connected, new
    /// connections need the new keys.
    Set {
        /// The host's NQN.
        nqn: String,
        #[command(flatten)]
        keys: KeyArgs,
        /// Remove the DH-HMAC-CHAP secrets: the host connects without
        /// authenticating.
        #[arg(long, conflicts_with_all = ["dhchap_secret", "dhchap_ctrl_secret"])]
        no_dhchap: bool,
        /// Remove the controller secret only.
        #[arg(long, conflicts_with = "dhchap_ctrl_secret")]
        no_dhchap_ctrl: bool,
        /// Remove the TLS PSK.
        #[arg(long, conflicts_with = "tls_psk")]
        no_tls_psk: bool,
    },
    /// List the hosts: which keys each has (never the keys).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a host: it connects without authenticating from now on,
    /// where its NQN is allowed.
    Remove {
        /// The host's NQN.
        nqn: String,
    },
}

/// The key to send for `given`, generating one for `generate`; a
/// generated key is also returned, to be printed once.
fn key(given: Option<String>, make: impl Fn() -> String) -> (Option<String>, Option<String>) {
    match given.as_deref() {
        Some("generate") => {
            let k = make();
            (Some(k.clone()), Some(k))
        }
        _ => (given, None),
    }
}

fn body(keys: KeyArgs) -> (Value, Vec<(&'static str, String)>) {
    let (dhchap, g1) = key(keys.dhchap_secret, || DhchapSecret::generate(Some(HashFn::Sha256)).to_interchange());
    let (ctrl, g2) = key(keys.dhchap_ctrl_secret, || DhchapSecret::generate(Some(HashFn::Sha256)).to_interchange());
    let (psk, g3) = key(keys.tls_psk, || TlsPsk::generate(HashFn::Sha256).to_interchange());
    let generated = [("dhchap-secret", g1), ("dhchap-ctrl-secret", g2), ("tls-psk", g3)]
        .into_iter()
        .filter_map(|(n, k)| k.map(|k| (n, k)))
        .collect();
    let mut v = json!({});
    for (field, value) in [
        ("dhchap_secret", dhchap),
        ("dhchap_ctrl_secret", ctrl),
        ("dhchap_hash", keys.dhchap_hash),
        ("dhchap_dhgroup", keys.dhchap_dhgroup),
        ("tls_psk", psk),
    ] {
        if let Some(x) = value {
            v[field] = json!(x);
        }
    }
    (v, generated)
}

fn show(v: &Value, json_out: bool, generated: &[(&str, String)]) -> anyhow::Result<()> {
    if json_out {
        let mut v = v.clone();
        for (name, k) in generated {
            v[format!("generated_{}", name.replace('-', "_"))] = json!(k);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{}", line(v));
    for (name, k) in generated {
        println!("{name}: {k}");
    }
    if !generated.is_empty() {
        eprintln!("generated keys are shown once: give them to the host (nvme connect --dhchap-secret / --tls ...)");
    }
    Ok(())
}

fn line(h: &Value) -> String {
    let dhchap = match (h["dhchap"].as_bool(), h["dhchap_bidirectional"].as_bool()) {
        (Some(true), Some(true)) => "bidirectional",
        (Some(true), _) => "host",
        _ => "-",
    };
    format!(
        "{:<64} {:<14} {:<7} {:<10} {}",
        h["nqn"].as_str().unwrap_or(""),
        dhchap,
        h["dhchap_hash"].as_str().unwrap_or(""),
        h["dhchap_dhgroup"].as_str().unwrap_or(""),
        if h["tls_psk"].as_bool() == Some(true) { "yes" } else { "-" }
    )
}

const HEADER: &str =
    "NQN                                                              DH-HMAC-CHAP   HASH    DHGROUP    TLS-PSK";

/// Runs `strata host ...` against `api`.
pub fn main(api: &str, command: HostCommand) -> anyhow::Result<()> {
    match command {
        HostCommand::Add { nqn, keys } => {
            let json_out = keys.json;
            let (mut v, generated) = body(keys);
            v["nqn"] = json!(nqn);
            let r = client::request(api, "POST", "/api/v1/hosts", Some(&v))?;
            if !json_out {
                println!("{HEADER}");
            }
            show(&r, json_out, &generated)
        }
        HostCommand::Set { nqn, keys, no_dhchap, no_dhchap_ctrl, no_tls_psk } => {
            let json_out = keys.json;
            let (mut v, generated) = body(keys);
            if no_dhchap {
                v["dhchap_secret"] = json!("");
                v["dhchap_ctrl_secret"] = json!("");
            }
            if no_dhchap_ctrl {
                v["dhchap_ctrl_secret"] = json!("");
            }
            if no_tls_psk {
                v["tls_psk"] = json!("");
            }
            let r = client::request(api, "PATCH", &format!("/api/v1/hosts/{nqn}"), Some(&v))?;
            if !json_out {
                println!("{HEADER}");
            }
            show(&r, json_out, &generated)
        }
        HostCommand::List { json: json_out } => {
            let v = client::request(api, "GET", "/api/v1/hosts", None)?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{HEADER}");
                for h in v.as_array().into_iter().flatten() {
                    println!("{}", line(h));
                }
            }
            Ok(())
        }
        HostCommand::Remove { nqn } => {
            let v = client::request(api, "DELETE", &format!("/api/v1/hosts/{nqn}"), None)?;
            println!("removed host {}", v["nqn"].as_str().unwrap_or(&nqn));
            Ok(())
        }
    }
}
