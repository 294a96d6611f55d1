//! The web dashboard, served by the node itself at `/` on its HTTP port:
//! three files built into the binary (`dashboard/`), nothing fetched from
//! elsewhere. The page holds no data and needs no token to load; its
//! script reads the API with the token the user gives it (see
//! `dashboard/app.js` and docs/operations.md, "The dashboard").

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};

const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

/// The policy the page runs under: its own files and its own API only,
/// no inline script, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The asset at `path` with its content type, if it is one.
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" | "/index.html" | "/dashboard" | "/dashboard/" => Some(("text/html; charset=utf-8", INDEX)),
        "/dashboard/app.js" => Some(("text/javascript; charset=utf-8", APP)),
        "/dashboard/style.css" => Some(("text/css; charset=utf-8", STYLE)),
        _ => None,
    }
}

/// The response carrying an asset.
pub fn response(content_type: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .header("content-security-policy", CSP)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("cache-control", "no-cache")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_assets_are_built_in_and_refer_only_to_each_other() {
        let (ct, html) = asset("/").unwrap();
        assert!(ct.starts_with("text/html"));
        for reference in ["/dashboard/app.js", "/dashboard/style.css"] {
            assert!(html.contains(reference), "{reference}");
            assert!(asset(reference).is_some(), "{reference} is served");
        }
        // Nothing from elsewhere, and no inline script the policy refuses.
        for page in [INDEX, APP, STYLE] {
            for outside in ["src=\"http", "href=\"http", "url(http", "fetch(\"http", "@import", "//cdn"] {
                assert!(!page.contains(outside), "an outside address in an asset: {outside}");
            }
        }
        assert!(!html.contains("<script>") && !html.contains("onclick="), "no inline script");
        assert!(asset("/dashboard/../etc/passwd").is_none() && asset("/api/v1/volumes").is_none());
    }
}
