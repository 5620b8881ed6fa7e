//! Kafka's DescribeAcls, CreateAcls and DeleteAcls (versions 1 to 3, as Kafka 4 serves them)
//! over the broker service's ACL operations: Kafka's codes and strings in, bindings and
//! filters out, and back. A broker that enforces no ACLs answers `SECURITY_DISABLED`.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::catalog::AclFilterRecord;
use crate::kafka::{code, error_code, message};
use crate::node::service::BrokerService;
use crate::security::acl::{
    AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType,
};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// A filter's fields as Kafka's requests carry them (DescribeAcls' and DeleteAcls' are alike).
struct FilterFields<'a> {
    resource_type: i8,
    resource_name: Option<&'a StrBytes>,
    pattern_type: i8,
    principal: Option<&'a StrBytes>,
    host: Option<&'a StrBytes>,
    operation: i8,
    permission: i8,
}

fn filter(f: &FilterFields<'_>) -> Result<AclBindingFilter, String> {
    let text = |s: Option<&StrBytes>| s.map(|s| s.as_str().to_owned());
    AclFilterRecord {
        resource_type: f.resource_type,
        resource_name: text(f.resource_name),
        pattern_type: f.pattern_type,
        principal: text(f.principal),
        host: text(f.host),
        operation: f.operation,
        permission: f.permission,
    }
    .filter()
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// DescribeAcls: the bindings the filter selects, grouped by resource pattern.
pub(crate) fn describe_acls(
    request: &DescribeAclsRequest,
    service: &BrokerService,
) -> DescribeAclsResponse {
    let mut r = DescribeAclsResponse::default();
    let fields = FilterFields {
        resource_type: request.resource_type_filter,
        resource_name: request.resource_name_filter.as_ref(),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.as_ref(),
        host: request.host_filter.as_ref(),
        operation: request.operation,
        permission: request.permission_type,
    };
    let described = service
        .acl_admin(AclOperation::Describe)
        .and_then(|()| filter(&fields).map_err(crate::Error::InvalidAcl))
        .and_then(|f| service.describe_acls(&f));
    match described {
        Ok(bindings) => {
            for b in bindings {
                let mut acl = AclDescription::default();
                acl.principal = s(&b.principal);
                acl.host = s(&b.host);
                acl.operation = b.operation.code();
                acl.permission_type = b.permission.code();
                let same = |res: &DescribeAclsResource| {
                    res.resource_type == b.resource_type.code()
                        && res.pattern_type == b.pattern_type.code()
                        && res.resource_name.as_str() == b.resource_name
                };
                // Bindings come sorted by pattern: one resource's are together.
                match r.resources.last_mut().filter(|res| same(res)) {
                    Some(res) => res.acls.push(acl),
                    None => {
                        let mut res = DescribeAclsResource::default();
                        res.resource_type = b.resource_type.code();
                        res.resource_name = s(&b.resource_name);
                        res.pattern_type = b.pattern_type.code();
                        res.acls.push(acl);
                        r.resources.push(res);
                    }
                }
            }
        }
        Err(e) => {
            r.error_code = error_code(&e);
            r.error_message = message(e.to_string());
        }
    }
    r
}

/// CreateAcls: one answer per creation, in order.
pub(crate) async fn create_acls(
    request: CreateAclsRequest,
    service: &BrokerService,
) -> CreateAclsResponse {
    if let Err(e) = service.acl_admin(AclOperation::Alter) {
        let mut r = CreateAclsResponse::default();
        r.results = request
            .creations
            .iter()
            .map(|_| creation_error(&e))
            .collect();
        return r;
    }
    let mut bindings = Vec::new();
    let mut refused = Vec::new();
    for c in &request.creations {
        let code_of = |what: &str, code: i8| format!("unknown {what} code {code}");
        let binding = (|| {
            Ok::<_, String>(AclBinding {
                resource_type: ResourceType::from_code(c.resource_type)
                    .ok_or_else(|| code_of("resource type", c.resource_type))?,
                resource_name: c.resource_name.as_str().to_owned(),
                pattern_type: PatternType::from_code(c.resource_pattern_type)
                    .ok_or_else(|| code_of("pattern type", c.resource_pattern_type))?,
                principal: c.principal.as_str().to_owned(),
                host: c.host.as_str().to_owned(),
                operation: AclOperation::from_code(c.operation)
                    .ok_or_else(|| code_of("operation", c.operation))?,
                permission: AclPermission::from_code(c.permission_type)
                    .ok_or_else(|| code_of("permission", c.permission_type))?,
            })
        })();
        match binding {
            Ok(b) => {
                bindings.push(b);
                refused.push(None);
            }
            Err(reason) => refused.push(Some(crate::Error::InvalidAcl(reason))),
        }
    }
    let mut created = service.create_acls(bindings).await.into_iter();
    let mut r = CreateAclsResponse::default();
    for refusal in refused {
        let outcome = match refusal {
            Some(e) => Err(e),
            None => created.next().unwrap_or(Err(crate::Error::InvalidAcl(
                "no answer for the creation".into(),
            ))),
        };
        r.results.push(match outcome {
            Ok(()) => AclCreationResult::default(),
            Err(e) => creation_error(&e),
        });
    }
    r
}

fn creation_error(e: &crate::Error) -> AclCreationResult {
    let mut res = AclCreationResult::default();
    res.error_code = error_code(e);
    res.error_message = message(e.to_string());
    res
}

/// DeleteAcls: per filter, the bindings it removed.
pub(crate) async fn delete_acls(
    request: DeleteAclsRequest,
    service: &BrokerService,
) -> DeleteAclsResponse {
    if let Err(e) = service.acl_admin(AclOperation::Alter) {
        let mut r = DeleteAclsResponse::default();
        for _ in &request.filters {
            let mut res = DeleteAclsFilterResult::default();
            res.error_code = error_code(&e);
            res.error_message = message(e.to_string());
            r.filter_results.push(res);
        }
        return r;
    }
    let parsed: Vec<Result<AclBindingFilter, String>> = request
        .filters
        .iter()
        .map(|f| {
            filter(&FilterFields {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref(),
                host: f.host_filter.as_ref(),
                operation: f.operation,
                permission: f.permission_type,
            })
        })
        .collect();
    let valid: Vec<AclBindingFilter> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    let deleted = service.delete_acls(&valid).await;
    let mut per_filter = match &deleted {
        Ok(removed) => removed.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut r = DeleteAclsResponse::default();
    for p in parsed {
        let mut res = DeleteAclsFilterResult::default();
        match (p, &deleted) {
            (Err(reason), _) => {
                res.error_code = code::INVALID_REQUEST;
                res.error_message = message(reason);
            }
            (Ok(_), Err(e)) => {
                res.error_code = error_code(e);
                res.error_message = message(e.to_string());
            }
            (Ok(_), Ok(_)) => {
                res.matching_acls = per_filter
                    .next()
                    .unwrap_or_default()
                    .iter()
                    .map(matching_acl)
                    .collect();
            }
        }
        r.filter_results.push(res);
    }
    r
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.resource_type = b.resource_type.code();
    m.resource_name = s(&b.resource_name);
    m.pattern_type = b.pattern_type.code();
    m.principal = s(&b.principal);
    m.host = s(&b.host);
    m.operation = b.operation.code();
    m.permission_type = b.permission.code();
    m
}
