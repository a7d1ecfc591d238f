use stampede::cached;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Row {
    version: u64,
}

#[cached(fresh = "60s", source_version = "version")]
async fn row(id: u64) -> Row {
    Row { version: id }
}

fn main() {}
