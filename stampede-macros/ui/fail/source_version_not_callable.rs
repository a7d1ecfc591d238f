use stampede::cached;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Row {
    version: u64,
}

const VERSION: u64 = 1;

#[cached(fresh = "60s", source_version = VERSION)]
async fn row(id: u64) -> Row {
    Row { version: id }
}

fn main() {}
