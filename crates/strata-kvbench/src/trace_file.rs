//! Prefix-cache traces: JSON lines, one request a line, each with a
//! `hash_ids` array of the block ids its prompt is made of (the Mooncake
//! conversation trace in `../shared/traces/` has this shape). Blank lines
//! are skipped; any other line that is not such a request is an error
//! naming the file and the request's number (blank lines not counted).

use std::path::Path;

use anyhow::Context;

/// Reads the block chains of a trace.
pub(crate) fn load(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Vec<u64>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?;
        let ids = v["hash_ids"]
            .as_array()
            .with_context(|| format!("{}:{}: no hash_ids array", path.display(), n + 1))?
            .iter()
            .map(|x| x.as_u64().with_context(|| format!("{}:{}: a hash id is not an integer", path.display(), n + 1)))
            .collect::<anyhow::Result<Vec<u64>>>()?;
        out.push(ids);
    }
    anyhow::ensure!(!out.is_empty(), "{}: no requests", path.display());
    Ok(out)
}
