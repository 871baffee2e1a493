//! Cells (docs/scaling.md, section 6): several deployments, each holding whole platforms.
//! A router in front sends each request to its cell from the credential alone, with no
//! database look-up; these are its rules, and each cell applies them too, refusing a
//! credential that names another cell before any database or bcrypt work.
//!
//! A partner key names its cell in its segment (`wk_livec7_…`; the spec calls the segment
//! opaque, so partners never parse it); a terminal JWT in its `cell` claim. A key or token
//! naming no cell belongs to the home cell: the deployment with no `WALLET_CELL`.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

use crate::domain::credentials::api_key;

/// The cell a partner key names; `None` for the home cell's keys and for anything that is
/// not a partner key.
pub fn cell_of_key(raw: &str) -> Option<&str> {
    let segment = api_key::segment(raw)?;
    let cell = segment
        .strip_prefix("live")
        .or_else(|| segment.strip_prefix("test"))?;
    (!cell.is_empty()).then_some(cell)
}

/// The cell a terminal JWT names, read from its payload without checking its signature
/// (the cell it goes to checks that); `None` for the home cell's tokens and for anything
/// unreadable.
pub fn cell_of_token(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("cell")?.as_str().map(str::to_string)
}

/// Whether a deployment of cell `own` may serve a credential naming `named`.
pub fn serves(own: Option<&str>, named: Option<&str>) -> bool {
    own == named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_the_cell_that_minted_it_and_a_home_key_names_none() {
        let k = api_key::mint(false, Some("c7"));
        assert!(k.raw.starts_with("wk_livec7_"), "{}", k.raw);
        assert_eq!(cell_of_key(&k.raw), Some("c7"));
        let k = api_key::mint(true, Some("eu2"));
        assert_eq!(cell_of_key(&k.raw), Some("eu2"));
        let home = api_key::mint(false, None);
        assert!(home.raw.starts_with("wk_live_"));
        assert_eq!(cell_of_key(&home.raw), None);
        assert_eq!(cell_of_key("wk_livec7_short"), None, "not a key");
        assert_eq!(cell_of_key("wo_op_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), None);
    }

    #[test]
    fn a_token_names_its_cell_in_its_payload() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"k","cell":"c7"}"#);
        assert_eq!(
            cell_of_token(&format!("h.{payload}.s")).as_deref(),
            Some("c7")
        );
        let home = URL_SAFE_NO_PAD.encode(br#"{"sub":"k"}"#);
        assert_eq!(cell_of_token(&format!("h.{home}.s")), None);
        assert_eq!(cell_of_token("not a token"), None);
    }

    #[test]
    fn a_cell_serves_its_own_credentials_only() {
        assert!(serves(None, None));
        assert!(serves(Some("c7"), Some("c7")));
        assert!(!serves(Some("c7"), None));
        assert!(!serves(None, Some("c7")));
        assert!(!serves(Some("c7"), Some("c8")));
    }
}
