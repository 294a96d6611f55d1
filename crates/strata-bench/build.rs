//! Embeds the git commit the crate was built from as `STRATA_GIT_COMMIT`
//! (reports record it). Builds outside a git checkout, or without git, say
//! "unknown"; packagers can set `STRATA_GIT_COMMIT` in the environment.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=STRATA_GIT_COMMIT");
    let commit = std::env::var("STRATA_GIT_COMMIT").ok().filter(|s| !s.is_empty());
    let commit = commit.or_else(|| git(&["rev-parse", "HEAD"])).unwrap_or_else(|| "unknown".into());
    // Rebuild when HEAD moves: HEAD itself (branch switch), the ref it
    // points to (new commit) and packed-refs (gc).
    // Only existing paths: cargo reruns the script on every build for a
    // path that does not exist.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let mut paths = vec![format!("{dir}/HEAD"), format!("{dir}/packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            paths.push(format!("{dir}/{r}"));
        }
        for p in paths.iter().filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=STRATA_GIT_COMMIT={commit}");
}
