//! Opaque cursors of paginated lists: base64url of `<list>:<last id>`. Ids are UUIDv7, so
//! "after this id" is a stable position; a cursor of another list is refused.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use uuid::Uuid;

use crate::{envelope::Page, error::ApiError};

pub fn encode(list: &str, id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(format!("{list}:{id}"))
}

/// The `cursor` query parameter of `list`, decoded when present.
pub fn after<S: AsRef<str>>(list: &str, cursor: &Option<S>) -> Result<Option<Uuid>, ApiError> {
    cursor
        .as_ref()
        .map(|c| decode(list, c.as_ref()))
        .transpose()
}

/// The page meta of a list page: the cursor after its last row when there is more.
pub fn page<T>(list: &str, rows: &[T], more: bool, id: impl Fn(&T) -> Uuid) -> Page {
    Page {
        next_cursor: if more {
            rows.last().map(|r| encode(list, id(r)))
        } else {
            None
        },
        has_more: more,
    }
}

pub fn decode(list: &str, cursor: &str) -> Result<Uuid, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| {
            s.strip_prefix(list)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|u| Uuid::parse_str(u).ok())
        })
        .ok_or_else(|| {
            ApiError::field(
                "query:cursor",
                "invalid_cursor",
                "is not a cursor this list returned",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_belongs_to_its_list() {
        let id = Uuid::now_v7();
        assert_eq!(decode("grant", &encode("grant", id)).unwrap(), id);
        assert!(decode("key", &encode("grant", id)).is_err());
        assert!(decode("grant", "!!").is_err());
    }
}
