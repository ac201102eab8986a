//! The queue workload: every worker pushes numbered items to one queue, takes a few, holds them
//! and acknowledges each; after the run a drainer takes what is left.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use lock_starter::values::{Delivery, Queue};
use lock_testkit::history::{Event, Op, Phase, monotonic_ns};
use tokio::time::{Instant, sleep};

use super::{Context, Faults, KEY, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "every confirmed push delivered (none lost but to a data loss); an item delivered again only after its consumer died, failed to acknowledge it or acknowledged it late";

/// How long a taken item stays hidden from other takes.
const VISIBILITY: Duration = Duration::from_secs(1);

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let queue = ctx.starter.values().queue::<i64>(KEY);
    let mut seq = 0;
    while Instant::now() < ctx.stop_at {
        seq += 1;
        let item = ctx.unique(seq);
        ctx.invoke(Op::Push, KEY, Some(item), None)?;
        match queue.push(&item).await {
            Ok(_) => ctx.complete(Op::Push, KEY, Ok((Some(item), None)), None)?,
            Err(e) => {
                ctx.complete(Op::Push, KEY, Err((e.code(), &e.to_string())), None)?;
                sleep(Duration::from_millis(50)).await;
            }
        }
        let asked = monotonic_ns();
        let taken = match queue.take(4, VISIBILITY).await {
            Ok(taken) => taken,
            Err(_) => {
                // Items it took come back after the visibility timeout.
                sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        delivered(ctx, &taken.items, asked)?;
        sleep(ctx.hold(seq)).await;
        for delivery in &taken.items {
            ack(ctx, &queue, &delivery.id, delivery.item).await?;
        }
    }
    Ok(())
}

/// Records each delivery at `asked`, when its take was invoked: the take happened on the
/// server between then and now.
fn delivered(ctx: &Context, items: &[Delivery<i64>], asked: u64) -> io::Result<()> {
    for delivery in items {
        ctx.recorder.record(Event {
            t_ns: asked,
            ok: Some(true),
            value: Some(delivery.item),
            token: Some(delivery.deliveries),
            ..Event::new(&ctx.name, Op::Deliver, Phase::Complete, KEY)
        })?;
    }
    Ok(())
}

async fn ack(ctx: &Context, queue: &Queue<i64>, id: &str, item: i64) -> io::Result<()> {
    ctx.invoke(Op::Ack, KEY, Some(item), None)?;
    match queue.ack(&[id.to_owned()]).await {
        Ok(1) => ctx.complete(Op::Ack, KEY, Ok((Some(item), None)), None),
        Ok(_) => ctx.complete(Op::Ack, KEY, Err(("NOT_PENDING", "not_pending")), None),
        Err(e) => ctx.complete(Op::Ack, KEY, Err((e.code(), &e.to_string())), None),
    }
}

/// Takes and acknowledges every item left, waiting out the visibility timeout of items whose
/// consumer died, until the queue is empty (or 20 s have passed).
pub(super) async fn drain(ctx: &Context) -> io::Result<()> {
    let queue = ctx.starter.values().queue::<i64>(KEY);
    let deadline = Instant::now() + VISIBILITY * 3 + Duration::from_secs(17);
    while Instant::now() < deadline {
        if queue.len().await.ok() == Some(0) {
            break;
        }
        let asked = monotonic_ns();
        let Ok(taken) = queue.take(100, VISIBILITY).await else {
            sleep(Duration::from_millis(100)).await;
            continue;
        };
        if taken.items.is_empty() {
            sleep(Duration::from_millis(100)).await;
        }
        delivered(ctx, &taken.items, asked)?;
        for delivery in &taken.items {
            ack(ctx, &queue, &delivery.id, delivery.item).await?;
        }
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    let (pushes, unfinished) = completions(events, Op::Push);
    // item → when its push was invoked, whatever its outcome
    let mut invoked: HashMap<i64, u64> = HashMap::new();
    for push in &pushes {
        if let Some(item) = push.value {
            invoked.insert(item, push.invoked);
        }
    }
    for push in &unfinished {
        if let Some(item) = push.value {
            invoked.insert(item, push.t_ns);
        }
    }
    // item → (process, invoked, completed) of each acknowledgement that removed it
    let mut acked: HashMap<i64, Vec<(&str, u64, u64)>> = HashMap::new();
    for ack in completions(events, Op::Ack).0.iter().filter(|a| a.ok()) {
        if let Some(item) = ack.value {
            acked.entry(item).or_default().push((
                ack.done.process.as_str(),
                ack.invoked,
                ack.done.t_ns,
            ));
        }
    }
    let mut deliveries: HashMap<i64, Vec<&Event>> = HashMap::new();
    for delivery in events.iter().filter(|e| e.op == Op::Deliver) {
        if let Some(item) = delivery.value {
            deliveries.entry(item).or_default().push(delivery);
        }
    }

    let mut confirmed = 0;
    let mut lost = 0;
    for push in pushes.iter().filter(|p| p.ok()) {
        confirmed += 1;
        let Some(item) = push.value else { continue };
        if deliveries.contains_key(&item) {
            continue;
        }
        lost += 1;
        let what = format!("item {item}: its push was confirmed, and it was never delivered");
        let why = faults
            .lost_between(push.invoked, u64::MAX)
            .then_some("Redis lost data");
        verdict.judge(what, why);
    }
    let mut redelivered = 0;
    for (item, list) in &deliveries {
        if !invoked.contains_key(item) {
            verdict
                .violations
                .push(format!("item {item} was delivered but never pushed"));
        }
        for pair in list.windows(2) {
            redelivered += 1;
            let (first, again) = (pair[0], pair[1]);
            let what = format!(
                "item {item} was delivered to {} and again to {} {} ms later",
                first.process,
                again.process,
                (again.t_ns - first.t_ns) / 1_000_000
            );
            let ack = acked.get(item).and_then(|a| {
                a.iter()
                    .find(|(p, invoked, _)| *p == first.process && *invoked >= first.t_ns)
            });
            let why = faults
                .explain(&first.process, first.t_ns, again.t_ns)
                .or(match ack {
                    None => Some("its first consumer's acknowledgement did not remove it"),
                    Some((_, _, done)) if *done > again.t_ns => {
                        Some("its first consumer acknowledged it after the redelivery")
                    }
                    // Acknowledged before the take that delivered it again began.
                    Some(_) => None,
                });
            match why {
                Some(why) => verdict.explained.push(format!("{what}: {why}")),
                None => verdict
                    .violations
                    .push(format!("{what}, after the first acknowledged it")),
            }
        }
    }
    verdict.operations = confirmed;
    verdict.counted = format!(
        "{confirmed} pushes confirmed, {} items delivered, {redelivered} redeliveries, {lost} never delivered",
        deliveries.len()
    );
    verdict
}
