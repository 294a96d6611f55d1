//! A minimal HTTP/1.1 client for the CLI's volume commands: one request per
//! connection (`Connection: close`), JSON in and out. The API is local and
//! ours, so this needs no more than that.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// Sends `method path` with an optional JSON body to the API at `base`
/// (`http://HOST:PORT`) and returns the JSON answer.
///
/// # Errors
///
/// Connection failures (with a hint to start `strata serve`), non-2xx
/// answers (with the API's error message) and malformed answers.
pub fn request(base: &str, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
    let hostport = base.strip_prefix("http://").unwrap_or(base).trim_end_matches('/');
    let mut stream = TcpStream::connect(hostport).with_context(|| {
        format!("cannot reach the strata API at {base}: is `strata serve` running? (--api or STRATA_API)")
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).context("reading the API answer")?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("malformed HTTP answer from the API")?;
    let status: u16 =
        head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("malformed HTTP status line")?;
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_string()
    };
    let json: Value = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body).context("API answer is not JSON")?
    };
    if !(200..300).contains(&status) {
        let msg = json.get("error").and_then(Value::as_str).unwrap_or("(no message)");
        bail!("{msg} (HTTP {status})");
    }
    Ok(json)
}

fn dechunk(mut s: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (len, rest) = s.split_once("\r\n").context("bad chunked encoding")?;
        let n = usize::from_str_radix(len.trim(), 16).context("bad chunk size")?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..n).context("short chunk")?);
        s = rest.get(n + 2..).unwrap_or("");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk("4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n").unwrap(), "{\"a\":1}");
        assert!(dechunk("zz\r\n").is_err());
    }

    #[test]
    fn unreachable_api_says_what_to_do() {
        let e = request("http://127.0.0.1:1", "GET", "/api/v1/volumes", None).unwrap_err();
        assert!(format!("{e:#}").contains("strata serve"));
    }
}
