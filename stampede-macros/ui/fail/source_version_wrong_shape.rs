use stampede::cached;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Row {
    version: u64,
}

fn version_of(row: Row) -> u64 {
    row.version
}

#[cached(fresh = "60s", source_version = version_of)]
async fn row(id: u64) -> Row {
    Row { version: id }
}

fn main() {}
