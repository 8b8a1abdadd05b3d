//! Streaming calls: a provider's stream once connected (items a gap apart, some without
//! content; a stall, a cut, an early end, a connection held open after the final item, a
//! flood), and a caller that commits at the first item or the first with content, then reads
//! its stream to the end with every item checked.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures::stream::LocalBoxStream;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::Rng;
use resil_runtime::stream::{Commit, ResilientStream};
use tokio::time::sleep;

use crate::build::Pol;
use crate::plan::TARGETS;
use crate::provider::{Provider, SimError};
use crate::world::World;

/// One item of a stream: the attempt that sent it (`tag`, unique in the world), its place,
/// whether it carries content and whether it is the final one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Chunk {
    pub(crate) tag: u64,
    pub(crate) seq: u32,
    pub(crate) content: bool,
    pub(crate) last: bool,
}

type Items = LocalBoxStream<'static, Result<Chunk, SimError>>;

enum Step {
    Item(Duration, Chunk),
    Fail(Duration),
    Stall,
}

impl Provider {
    /// The stream of a connected attempt tagged `tag`, drawn from the caller's generator.
    pub(crate) fn items(&self, tag: u64, rng: &Cell<Option<StdRng>>) -> Items {
        let shape = &self.spec.stream;
        let mut draw = rng.take().expect("one draw at a time");
        let flood = draw.random_bool(shape.p_flood);
        let count = if flood {
            300
        } else {
            shape.headers + shape.items
        };
        // Where a stall, a cut or an early end comes, if it does (never: past the end).
        let mut at = |p: f64| {
            if draw.random_bool(p) {
                draw.random_range(0..count)
            } else {
                u32::MAX
            }
        };
        let (stall, cut, short) = (at(shape.p_stall), at(shape.p_cut), at(shape.p_short));
        let linger = draw.random_bool(shape.p_linger);
        let gap = if flood { Duration::ZERO } else { shape.gap };
        let mut steps = Vec::new();
        for seq in 0..count {
            let gap = gap.mul_f64(draw.random_range(0.0..2.0));
            if seq == stall {
                steps.push(Step::Stall);
                break;
            }
            if seq == cut {
                steps.push(Step::Fail(gap));
                break;
            }
            if seq == short {
                break;
            }
            let last = seq + 1 == count;
            let content = seq >= shape.headers;
            steps.push(Step::Item(
                gap,
                Chunk {
                    tag,
                    seq,
                    content,
                    last,
                },
            ));
            if last && linger {
                steps.push(Step::Stall);
            }
        }
        rng.set(Some(draw));
        futures::stream::unfold(steps.into_iter(), |mut steps| async move {
            match steps.next()? {
                Step::Item(gap, chunk) => {
                    sleep(gap).await;
                    Some((Ok(chunk), steps))
                }
                Step::Fail(gap) => {
                    sleep(gap).await;
                    Some((Err(SimError::Transient(None)), steps))
                }
                Step::Stall => std::future::pending().await,
            }
        })
        .boxed_local()
    }
}

/// One attempt of a streaming call: checked as any attempt, then connected to `target`.
async fn connect(
    world: Rc<World>,
    caller: usize,
    index: usize,
    target: usize,
    rng: Rc<Cell<Option<StdRng>>>,
) -> Result<Items, SimError> {
    world.reached(caller, 0, index, target, None);
    let answer = world.providers[target].call(&rng).await;
    world.sync();
    world.checker.borrow_mut().answer(index, target, &answer);
    answer.result?;
    let tag = world.tag();
    let instance = world.plan.callers[caller].instance;
    let breaker = world.breaker(instance, 0, target, |b| Some(b.name().to_owned()));
    world.checker.borrow_mut().connected(index, tag, breaker);
    let line = format!(
        "c{} stream {tag} from {}",
        world.plan.callers[caller].id, TARGETS[target]
    );
    world.checker.borrow_mut().log(line);
    Ok(world.providers[target].items(tag, &rng))
}

fn has_content(chunk: &Chunk) -> bool {
    chunk.content
}

fn is_last(chunk: &Chunk) -> bool {
    chunk.last
}

/// A caller's streaming call through the outer policy: committed, then read to its end.
pub(crate) async fn stream_call(
    world: Rc<World>,
    caller: usize,
    index: usize,
    rng: Rc<Cell<Option<StdRng>>>,
) -> Result<u32, SimError> {
    let spec = &world.plan.callers[caller];
    let commit = match spec.stream {
        Some(true) => Commit::when(has_content as fn(&Chunk) -> bool),
        _ => Commit::first_item(),
    };
    let make = |target: usize| connect(world.clone(), caller, index, target, rng.clone());
    let of = |name: &str| TARGETS.iter().position(|t| *t == name).unwrap_or(0);
    let first = TARGETS[spec.targets[0]];
    let others: Vec<&'static str> = spec.targets[1..].iter().map(|&t| TARGETS[t]).collect();
    let outer = &world.policies[spec.instance].0;
    let stream = match (outer, spec.routed) {
        (Pol::Plain(policy), true) => {
            let make = |name: &'static str| make(of(name));
            read(
                &world,
                index,
                policy
                    .run_stream_routed_until(first, others, commit, make)
                    .await,
            )
            .await
        }
        (Pol::Keyed(policy), true) => {
            let make = |name: &'static str| make(of(name));
            read(
                &world,
                index,
                policy
                    .run_stream_routed_until(first, others, commit, make)
                    .await,
            )
            .await
        }
        (Pol::Plain(policy), false) => {
            let make = || make(spec.targets[0]);
            read(&world, index, policy.run_stream_until(commit, make).await).await
        }
        (Pol::Keyed(policy), false) => {
            let make = || make(spec.targets[0]);
            read(
                &world,
                index,
                policy.run_stream_keyed_until(first, commit, make).await,
            )
            .await
        }
    };
    stream.map(|()| 0)
}

/// Reads a committed stream to its end, every item checked.
async fn read<S>(
    world: &World,
    index: usize,
    stream: Result<ResilientStream<'_, Chunk, SimError, S>, SimError>,
) -> Result<(), SimError>
where
    S: futures::Stream<Item = Result<Chunk, SimError>>,
{
    let mut stream = stream?.complete_when(is_last);
    while let Some(item) = stream.next().await {
        // Before the events: the runtime counts an error item for the breaker before the
        // consumer reads it, and may open it then.
        world.checker.borrow_mut().item(index, &item);
        world.sync();
    }
    world.checker.borrow_mut().stream_ended(index);
    Ok(())
}
