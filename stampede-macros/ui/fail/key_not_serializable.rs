use stampede::cached;

#[derive(Clone, PartialEq, Eq, Hash)]
struct TenantId(u32);

#[cached(fresh = "60s")]
async fn tenant_name(tenant: TenantId) -> String {
    format!("tenant {}", tenant.0)
}

fn main() {}
