use stampede::cached;

// Shaped like `sqlx::Error`, whose only generic `From` takes database errors.
mod sqlx {
    pub trait DatabaseError: std::fmt::Debug {}

    #[derive(Debug)]
    pub enum Error {
        Database(String),
    }

    impl<E: DatabaseError> From<E> for Error {
        fn from(error: E) -> Self {
            Error::Database(format!("{error:?}"))
        }
    }

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }
}

#[cached(fresh = "60s")]
async fn fetch(id: u64) -> Result<u64, sqlx::Error> {
    Ok(id)
}

fn main() {}
