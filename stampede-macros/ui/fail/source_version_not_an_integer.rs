use stampede::cached;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Row {
    updated_at: String,
}

#[cached(fresh = "60s", source_version = |row: &Row| row.updated_at.clone())]
async fn row(id: u64) -> Row {
    Row {
        updated_at: id.to_string(),
    }
}

fn main() {}
