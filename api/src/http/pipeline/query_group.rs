//! Query parameters taken as one handler argument: a list operation's filters, parsed and
//! documented exactly as poem-openapi parses and documents a `Query` argument each.
//!
//! poem-openapi documents one parameter per handler argument, so a list with eight filters
//! took eight arguments. A group (declared with `query_group!`) is one argument. In the
//! document it first stands as one placeholder parameter, which `expand` replaces, in
//! place, with its members; each member is parsed by poem-openapi's own `Query` extractor,
//! so errors (ParseParamError, answered as VALIDATION_ERROR) are the same as before.
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaOperationParam, MetaParamIn, MetaSchema, MetaSchemaRef, Registry},
    types::{ParseFromParameter, Type},
};
use serde_json::Value;

/// A named set of query parameters (see `query_group!`).
pub trait QueryGroup: Sized + Send {
    /// The group's name: unique among groups, it marks the placeholder in the document.
    const NAME: &'static str;
    /// Registers the members' types.
    fn register(registry: &mut Registry);
    /// Each member's name and schema.
    fn schemas() -> Vec<(&'static str, MetaSchemaRef)>;
    /// The members as poem-openapi documents a `Query` argument, in order.
    fn params() -> Vec<MetaOperationParam>;
    fn parse(
        request: &Request,
        body: &mut RequestBody,
    ) -> impl Future<Output = poem::Result<Self>> + Send;
}

/// A handler argument holding a group's parsed members.
pub struct Grouped<G>(pub G);

/// The `$ref` prefix of a placeholder; no component carries it.
const PLACEHOLDER: &str = "QueryGroup.";

impl<'a, G: QueryGroup> ApiExtractor<'a> for Grouped<G> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::Parameter];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        G::register(registry);
        // The placeholder must name a schema, and that schema must reach the members'
        // own, or poem-openapi drops them as unused; `expand` removes it again.
        let mut placeholder = MetaSchema::new("object");
        placeholder.properties = G::schemas();
        registry
            .schemas
            .insert(format!("{PLACEHOLDER}{}", G::NAME), placeholder);
    }

    fn param_in() -> Option<MetaParamIn> {
        Some(MetaParamIn::Query)
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        Some(MetaSchemaRef::Reference(format!(
            "{PLACEHOLDER}{}",
            G::NAME
        )))
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        G::parse(request, body).await.map(Grouped)
    }
}

/// One member as poem-openapi documents a `Query<T>` argument with no default: doc lines
/// trimmed and joined with newlines, exploded, no style.
pub fn member<T: Type>(name: &str, doc: &[&str]) -> MetaOperationParam {
    let description = doc.iter().map(|l| l.trim()).collect::<Vec<_>>().join("\n");
    MetaOperationParam {
        name: name.to_string(),
        schema: T::schema_ref(),
        in_type: MetaParamIn::Query,
        description: (!description.is_empty()).then_some(description),
        required: T::IS_REQUIRED,
        deprecated: false,
        explode: true,
        style: None,
    }
}

/// Parses one member with poem-openapi's own `Query` extractor.
pub async fn parse_member<T: ParseFromParameter>(
    request: &Request,
    body: &mut RequestBody,
    name: &'static str,
) -> poem::Result<T> {
    let opts = ExtractParamOptions {
        name,
        ignore_case: false,
        default_value: None,
        example_value: None,
        explode: true,
        style: None,
    };
    poem_openapi::param::Query::<T>::from_request(request, body, opts)
        .await
        .map(|q| q.0)
}

/// Declares a query group: a struct whose fields are query parameters, each with its doc
/// comment (published as the parameter's description) and its name in the query string.
macro_rules! query_group {
    (
        $(#[$meta:meta])*
        pub struct $group:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ty = $name:literal,
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $group {
            $($(#[doc = $doc])* pub $field: $ty,)*
        }

        impl $crate::http::pipeline::query_group::QueryGroup for $group {
            const NAME: &'static str = stringify!($group);

            fn register(registry: &mut poem_openapi::registry::Registry) {
                $(<$ty as poem_openapi::types::Type>::register(registry);)*
            }

            fn schemas() -> Vec<(&'static str, poem_openapi::registry::MetaSchemaRef)> {
                vec![$(($name, <$ty as poem_openapi::types::Type>::schema_ref()),)*]
            }

            fn params() -> Vec<poem_openapi::registry::MetaOperationParam> {
                vec![$($crate::http::pipeline::query_group::member::<$ty>($name, &[$($doc),*]),)*]
            }

            async fn parse(
                request: &poem::Request,
                body: &mut poem::RequestBody,
            ) -> poem::Result<Self> {
                Ok($group {
                    $($field: $crate::http::pipeline::query_group::parse_member::<$ty>(
                        request, body, $name,
                    )
                    .await?,)*
                })
            }
        }
    };
}
pub(crate) use query_group;

/// What a group's placeholder expands to in the document.
pub struct Expansion {
    pub name: &'static str,
    pub params: fn() -> Vec<MetaOperationParam>,
}

impl Expansion {
    pub fn of<G: QueryGroup>() -> Self {
        Expansion {
            name: G::NAME,
            params: G::params,
        }
    }
}

/// Replaces each placeholder parameter of the document's operations with its group's
/// members, in place, and drops the placeholders' schemas. A placeholder left unexpanded is
/// a group missing from `groups`: it panics at start-up, before anything is served.
pub fn expand(doc: &mut Value, groups: &[Expansion]) {
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        schemas.retain(|name, _| !name.starts_with(PLACEHOLDER));
    }
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let marker = format!("#/components/schemas/{PLACEHOLDER}");
    for op in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
            continue;
        };
        let mut out = Vec::with_capacity(params.len());
        for p in params.drain(..) {
            let group = p
                .pointer("/schema/$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(&marker));
            let Some(group) = group else {
                out.push(p);
                continue;
            };
            let g = groups
                .iter()
                .find(|g| g.name == group)
                .unwrap_or_else(|| panic!("query group {group} is not listed for the document"));
            out.extend(
                (g.params)()
                    .into_iter()
                    .map(|m| serde_json::to_value(m).expect("a parameter serializes")),
            );
        }
        *params = out;
    }
}

#[cfg(test)]
mod tests {
    use poem_openapi::{OpenApi, OpenApiService, param::Query};
    use serde_json::{Value, json};

    use super::*;
    use crate::http::pipeline::fields::{PageLimit, Text};

    query_group! {
        /// Two members, one documented over two lines.
        pub struct Pair {
            /// Only this one,
            /// say.
            name: Option<Text<1, 8>> = "name",
            limit: Option<PageLimit> = "limit",
        }
    }

    struct OneByOne;

    #[OpenApi]
    impl OneByOne {
        #[oai(path = "/one", method = "get")]
        async fn one(
            &self,
            /// Only this one,
            /// say.
            name: Query<Option<Text<1, 8>>>,
            limit: Query<Option<PageLimit>>,
        ) -> poem_openapi::payload::PlainText<String> {
            poem_openapi::payload::PlainText(format!(
                "{:?} {:?}",
                name.0.as_deref(),
                limit.0.map(|l| l.0)
            ))
        }
    }

    struct Grouping;

    #[OpenApi]
    impl Grouping {
        #[oai(path = "/one", method = "get")]
        async fn one(&self, q: Grouped<Pair>) -> poem_openapi::payload::PlainText<String> {
            let Pair { name, limit } = q.0;
            poem_openapi::payload::PlainText(format!(
                "{:?} {:?}",
                name.as_deref(),
                limit.map(|l| l.0)
            ))
        }
    }

    fn parameters<T: OpenApi>(api: T) -> Value {
        let mut doc: Value =
            serde_json::from_str(&OpenApiService::new(api, "t", "1").spec()).unwrap();
        expand(&mut doc, &[Expansion::of::<Pair>()]);
        doc["paths"]["/one"]["get"]["parameters"].take()
    }

    #[test]
    fn a_group_is_documented_as_its_members_would_be_one_by_one() {
        let grouped = parameters(Grouping);
        assert_eq!(grouped, parameters(OneByOne));
        assert_eq!(grouped[0]["name"], "name");
        assert_eq!(grouped[0]["description"], "Only this one,\nsay.");
        assert_eq!(grouped[1]["name"], "limit");
    }

    #[tokio::test]
    async fn a_group_parses_and_refuses_as_its_members_would_one_by_one() {
        use poem::{Endpoint, IntoEndpoint, Request};
        let one = OpenApiService::new(OneByOne, "t", "1").into_endpoint();
        let grouped = OpenApiService::new(Grouping, "t", "1").into_endpoint();
        let mut answers = Vec::new();
        for query in [
            "",
            "?name=ab&limit=5",
            "?limit=5",
            "?limit=x",
            "?name=toolongname",
        ] {
            let ask = || Request::builder().uri_str(format!("/one{query}")).finish();
            let (a, b) = (
                one.get_response(ask()).await,
                grouped.get_response(ask()).await,
            );
            assert_eq!(a.status(), b.status(), "{query}");
            let status = a.status();
            let (a, b) = (
                a.into_body().into_string().await.unwrap(),
                b.into_body().into_string().await.unwrap(),
            );
            assert_eq!(a, b, "{query}");
            answers.push((status.as_u16(), a));
        }
        assert_eq!(answers[1], (200, r#"Some("ab") Some(5)"#.to_string()));
        assert_eq!(answers[3].0, 400, "a limit that is no number is refused");
    }

    #[test]
    fn a_placeholder_expands_in_place_and_other_parameters_stay() {
        let mut doc = json!({"paths": {"/x": {"get": {"parameters": [
            {"name": "id", "in": "path"},
            {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/QueryGroup.Pair"}},
            {"name": "after", "in": "query"},
        ]}}}});
        expand(&mut doc, &[Expansion::of::<Pair>()]);
        let names: Vec<&str> = doc["paths"]["/x"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["id", "name", "limit", "after"]);
    }

    #[test]
    #[should_panic(expected = "query group Pair is not listed")]
    fn a_group_missing_from_the_list_stops_the_start() {
        let mut doc = json!({"paths": {"/x": {"get": {"parameters": [
            {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/QueryGroup.Pair"}},
        ]}}}});
        expand(&mut doc, &[]);
    }
}
