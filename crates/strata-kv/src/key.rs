//! The reference key scheme: chained SHA-256 block keys that every
//! process and machine computes the same way.
//!
//! The store treats keys as opaque bytes. Engines that share blocks must
//! agree on them exactly, and the commonest cause of a silent zero hit
//! rate in KV caches is a key that differs between processes (Python's
//! salted `hash()`, a dict's order, a dtype spelled two ways). This
//! scheme leaves nothing to the platform:
//!
//! ```text
//! context = SHA-256("strata-kv/v1" || field("model") || field(model) || ... )
//! key[0]  = SHA-256(context || 0x00 || u32le(n) || u32le(token)*n)
//! key[i]  = SHA-256(context || key[i-1] || u32le(n) || u32le(token)*n)
//! ```
//!
//! where `field(x)` is `u32le(len(x)) || x`, the context fields are, in
//! this order, model, revision, dtype, layout, page size (u32le),
//! tensor-parallel rank and size (u32le each), and the extra tags sorted
//! by name, and each block holds `page_size` token ids (the last one of a
//! prompt may hold fewer: then it is usually not stored). The key written
//! to the store is the 32-byte digest, hex-encoded (64 ASCII bytes), so
//! that redis-cli shows it.
//!
//! Two prompts with the same first `n` pages share their first `n` keys,
//! and a lookup of a chain ([`crate::KvStore::lookup`]) answers how many
//! of its pages are cached.

use sha2::{Digest, Sha256};

/// What a KV block depends on besides its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyContext {
    /// Model name, e.g. "meta-llama/Llama-3.1-70B".
    pub model: String,
    /// Weights revision (a commit hash or version).
    pub revision: String,
    /// KV dtype, e.g. "bf16", "fp8_e4m3".
    pub dtype: String,
    /// Tensor layout of a block, e.g. "NHD" or "HND".
    pub layout: String,
    /// Tokens per block.
    pub page_size: u32,
    /// Tensor-parallel rank of the shard this block holds.
    pub tp_rank: u32,
    /// Tensor-parallel size.
    pub tp_size: u32,
    /// Anything else that changes the bytes (LoRA id, rope scaling...).
    pub tags: Vec<(String, String)>,
}

fn field(h: &mut Sha256, name: &str, value: &[u8]) {
    h.update((name.len() as u32).to_le_bytes());
    h.update(name.as_bytes());
    h.update((value.len() as u32).to_le_bytes());
    h.update(value);
}

impl KeyContext {
    /// The context digest every block key of this context starts from.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"strata-kv/v1");
        field(&mut h, "model", self.model.as_bytes());
        field(&mut h, "revision", self.revision.as_bytes());
        field(&mut h, "dtype", self.dtype.as_bytes());
        field(&mut h, "layout", self.layout.as_bytes());
        field(&mut h, "page_size", &self.page_size.to_le_bytes());
        field(&mut h, "tp_rank", &self.tp_rank.to_le_bytes());
        field(&mut h, "tp_size", &self.tp_size.to_le_bytes());
        let mut tags: Vec<_> = self.tags.iter().collect();
        tags.sort();
        for (k, v) in tags {
            field(&mut h, k, v.as_bytes());
        }
        h.finalize().into()
    }

    /// The keys of the whole pages of `tokens`, in order, hex-encoded.
    /// A trailing partial page gets no key.
    pub fn chain(&self, tokens: &[u32]) -> Vec<String> {
        let ctx = self.digest();
        let page = self.page_size.max(1) as usize;
        let mut parent: Option<[u8; 32]> = None;
        tokens
            .chunks_exact(page)
            .map(|block| {
                let k = block_key(&ctx, parent.as_ref(), block);
                parent = Some(k);
                hex::encode(k)
            })
            .collect()
    }
}

/// One block's key from its context digest, its parent's key (`None` for
/// the first block) and its token ids.
pub fn block_key(ctx: &[u8; 32], parent: Option<&[u8; 32]>, tokens: &[u32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(ctx);
    match parent {
        Some(p) => h.update(p),
        None => h.update([0u8]),
    }
    h.update((tokens.len() as u32).to_le_bytes());
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> KeyContext {
        KeyContext {
            model: "llama".into(),
            revision: "r1".into(),
            dtype: "bf16".into(),
            layout: "NHD".into(),
            page_size: 4,
            tp_rank: 0,
            tp_size: 1,
            tags: vec![("lora".into(), "none".into()), ("a".into(), "b".into())],
        }
    }

    #[test]
    fn shared_prefixes_share_keys_and_everything_else_changes_them() {
        let a = ctx().chain(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let b = ctx().chain(&[1, 2, 3, 4, 5, 6, 7, 0]);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let mut other = ctx();
        other.tp_rank = 1;
        assert_ne!(other.chain(&[1, 2, 3, 4])[0], a[0]);
        // Tag order does not matter.
        let mut swapped = ctx();
        swapped.tags.reverse();
        assert_eq!(swapped.chain(&[1, 2, 3, 4])[0], a[0]);
    }

    #[test]
    fn keys_are_pinned() {
        // The scheme is a contract with every engine that computes keys:
        // this value may never change. It was computed independently with
        // Python's hashlib (the example in docs/kv.md).
        assert_eq!(ctx().chain(&[1, 2, 3, 4])[0], PINNED);
    }

    const PINNED: &str = "fea11f54b02fc5fabccd01d8a19e7136bf179b1e67974a1dc3b52867620b1f70";
}
