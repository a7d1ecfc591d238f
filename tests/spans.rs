//! A detached load runs as its own task but inside the caller's span: `origin_load` is a
//! child of the span current at the call, and the origin's own events see the request.
use crate::common;

use common::{bounded, AppError};
use stampede::{Cache, Policy};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type SpanAndParent = (String, Option<String>);

/// For each span opened, its name and its parent's; for each event, the names of the
/// spans it happened in, innermost first.
#[derive(Clone, Default)]
struct Lineage {
    spans: Arc<Mutex<Vec<SpanAndParent>>>,
    events: Arc<Mutex<Vec<Vec<String>>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Lineage {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name().to_owned());
        let name = attrs.metadata().name().to_owned();
        self.spans.lock().unwrap().push((name, parent));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let scope = ctx
            .event_scope(event)
            .map(|scope| scope.map(|span| span.name().to_owned()).collect())
            .unwrap_or_default();
        self.events.lock().unwrap().push(scope);
    }
}

#[tokio::test]
async fn a_detached_load_is_a_child_of_the_callers_span() {
    let lineage = Lineage::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lineage.clone()));
    let policy = Policy::builder("spans")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, u32, AppError> = Cache::new(policy);
    let request = tracing::info_span!("request");
    let load = cache.load(1, || async {
        tracing::info!("inside the origin");
        Ok(7)
    });
    assert_eq!(
        bounded(tracing::Instrument::instrument(load, request)).await,
        Ok(7)
    );
    let spans = lineage.spans.lock().unwrap().clone();
    assert!(
        spans.contains(&("origin_load".to_owned(), Some("request".to_owned()))),
        "origin_load is a child of the request: {spans:?}"
    );
    let events = lineage.events.lock().unwrap().clone();
    assert!(
        events.contains(&vec!["origin_load".to_owned(), "request".to_owned()]),
        "the origin's event sees the request: {events:?}"
    );
}
