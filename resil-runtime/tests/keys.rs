//! Keyed policies: a breaker, a bulkhead and rate gates per value of a key, isolated per key
//! and bounded by `max_keys`.

mod common;

use std::time::Duration;

use common::TestError;
use futures::FutureExt;
use resil_runtime::{BreakerState, ConfigError, KeyTuple, Policy, Rejected};
use tokio::sync::Semaphore;
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn a_bulkhead_per_key_fills_for_its_key_only() {
    let policy = Policy::builder()
        .keyed("user")
        .bulkhead(1)
        .bulkhead_per_key()
        .build()
        .unwrap();
    let gate = Semaphore::new(0);
    let mut ann = Box::pin(policy.run_keyed("ann", || async {
        let _ = gate.acquire().await;
        Ok::<_, TestError>(1)
    }));
    assert!((&mut ann).now_or_never().is_none(), "ann holds her permit");

    let again: Result<u32, TestError> = policy.run_keyed("ann", || async { Ok(2) }).await;
    assert_eq!(
        again,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 1 }))
    );
    let bob: Result<u32, TestError> = policy.run_keyed("bob", || async { Ok(3) }).await;
    assert_eq!(bob, Ok(3), "bob has his own bulkhead");

    gate.add_permits(1);
    assert_eq!(ann.await, Ok(1));
    let keys = policy.keys().unwrap();
    assert_eq!(keys.get("ann").bulkhead().unwrap().in_flight(), 0);
    assert!(policy.bulkhead().is_none(), "no bulkhead is shared");
}

#[tokio::test(start_paused = true)]
async fn a_queue_per_key_serves_its_key_in_turn() {
    let policy = Policy::builder()
        .keyed("user")
        .bulkhead(1)
        .bulkhead_queue(1)
        .bulkhead_per_key()
        .build()
        .unwrap();
    let started = Instant::now();
    let call = |key: &'static str| {
        let policy = &policy;
        async move {
            policy
                .run_keyed(key, || async move {
                    tokio::time::sleep(SECOND).await;
                    Ok::<_, TestError>(started.elapsed())
                })
                .await
        }
    };
    let (first, second, third, other) =
        tokio::join!(call("ann"), call("ann"), call("ann"), call("bob"));
    assert_eq!(first, Ok(SECOND));
    assert_eq!(second, Ok(2 * SECOND), "waited in ann's queue");
    assert_eq!(
        third,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 1 })),
        "ann's queue of one was taken"
    );
    assert_eq!(other, Ok(SECOND), "bob's bulkhead is his own");
}

#[tokio::test(start_paused = true)]
async fn a_rate_per_key_spaces_each_key_on_its_own() {
    let policy = Policy::builder()
        .keyed("model")
        .rate(1, SECOND, 1)
        .rate_per_key()
        .build()
        .unwrap();
    let started = Instant::now();
    let call = |key: &'static str| {
        let policy = &policy;
        async move {
            policy
                .run_keyed(key, || async { Ok::<_, TestError>(started.elapsed()) })
                .await
                .unwrap()
        }
    };
    let times = futures::future::join_all([call("a"), call("a"), call("b"), call("b")]).await;
    assert_eq!(times, [Duration::ZERO, SECOND, Duration::ZERO, SECOND]);
}

#[tokio::test(start_paused = true)]
async fn a_tuple_keys_each_pair() {
    let policy = Policy::builder()
        .breaker_per_key("(provider, model)", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let failed: Result<u32, TestError> = policy
        .run_keyed(&KeyTuple(("openai", "gpt-4o")), || async {
            Err(TestError::Busy)
        })
        .await;
    assert_eq!(failed, Err(TestError::Busy));
    let keys = policy.keys().unwrap();
    let dead = keys.get(&KeyTuple(("openai", "gpt-4o")));
    let breaker = dead.breaker().unwrap();
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(breaker.name(), "(provider, model)=(openai, gpt-4o)");
    let other = keys.get(&KeyTuple(("openai", "o3")));
    assert_eq!(other.breaker().unwrap().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn keys_are_bounded_and_a_key_in_use_is_kept() {
    let policy = Policy::builder()
        .keyed("user")
        .bulkhead(1)
        .bulkhead_per_key()
        .rate(1, SECOND, 1)
        .rate_per_key()
        .max_keys(10)
        .build()
        .unwrap();
    let gate = Semaphore::new(0);
    let mut busy = Box::pin(policy.run_keyed(&0u32, || async {
        let _ = gate.acquire().await;
        Ok::<_, TestError>(())
    }));
    assert!((&mut busy).now_or_never().is_none());
    tokio::time::advance(SECOND).await;
    for user in 1..1_000u32 {
        let ok: Result<(), TestError> = policy.run_keyed(&user, || async { Ok(()) }).await;
        assert_eq!(ok, Ok(()));
    }
    let keys = policy.keys().unwrap();
    assert!(keys.len() <= 10, "{}", keys.len());
    assert_eq!(
        keys.get(&0u32).bulkhead().unwrap().in_flight(),
        1,
        "user 0's call still holds its bulkhead: the key was not forgotten"
    );
    gate.add_permits(1);
    assert_eq!(busy.await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn what_is_not_per_key_stays_shared() {
    let policy = Policy::builder()
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .bulkhead(1)
        .build()
        .unwrap();
    let gate = Semaphore::new(0);
    let mut first = Box::pin(policy.run_keyed("a", || async {
        let _ = gate.acquire().await;
        Ok::<_, TestError>(())
    }));
    assert!((&mut first).now_or_never().is_none());
    let other: Result<(), TestError> = policy.run_keyed("b", || async { Ok(()) }).await;
    assert_eq!(
        other,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 1 })),
        "one bulkhead for every model"
    );
    gate.add_permits(1);
    first.await.unwrap();
    assert!(policy.keys().unwrap().get("a").bulkhead().is_none());
}

#[test]
fn keying_nothing_or_a_missing_setting_is_refused_with_the_fix() {
    let nothing = Policy::builder().keyed("user").build().unwrap_err();
    assert_eq!(
        nothing,
        ConfigError::KeyScopesNothing {
            label: "user".into()
        }
    );
    assert!(
        nothing.to_string().contains(".bulkhead_per_key()"),
        "{nothing}"
    );
    let missing = Policy::builder()
        .keyed("user")
        .rate_per_key()
        .build()
        .unwrap_err();
    assert_eq!(missing, ConfigError::PerKeyWithout { key: "rate" });
    assert!(missing.to_string().contains("`.rate(…)`"), "{missing}");
}

/// Keys that print alike, or carry the encoding's own punctuation, a newline, a megabyte: each
/// opens its own breaker and no other, under its own name, found by that name alone.
#[tokio::test(start_paused = true)]
async fn distinct_keys_never_share_state_or_a_name() {
    let policy = Policy::builder()
        .breaker_per_key("(provider, model)", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let mega = "m".repeat(1 << 20);
    let mega_too = format!("{mega}n");
    let pairs: Vec<(&str, &str)> = vec![
        ("openai, gpt-4o", "mini"),
        ("openai", "gpt-4o, mini"),
        ("openai", "gpt-4o"),
        ("a)", "(b"),
        ("a", ")(b"),
        ("}", "{"),
        ("x:y", "z"),
        ("x", "y:z"),
        ("k=v", ""),
        ("k", "=v"),
        ("\"", ""),
        ("", "\""),
        ("line\nbreak", "x"),
        ("line", "\nbreak x"),
        ("42", "true"),
        ("\\\"", "x"),
        ("\\", "\"x"),
        (&mega, "x"),
        (&mega_too, "x"),
        (&mega[1..], "x"),
    ];
    let keys = policy.keys().unwrap();
    let mut names = std::collections::HashSet::new();
    for (i, (provider, model)) in pairs.iter().enumerate() {
        let failed: Result<(), TestError> = policy
            .run_keyed(&KeyTuple((*provider, *model)), || async {
                Err(TestError::Busy)
            })
            .await;
        assert_eq!(failed, Err(TestError::Busy), "key {i} made its call");
        let scope = keys.get(&KeyTuple((*provider, *model)));
        let name = scope.breaker().unwrap().name().to_owned();
        assert!(name.len() <= 300, "key {i}: a name of {} bytes", name.len());
        assert!(names.insert(name.clone()), "key {i} shares the name {name}");
        assert_eq!(
            resil_runtime::breaker::find(&name).map(|b| b.state()),
            Some(BreakerState::Open),
            "key {i} is found by its name"
        );
        for (j, (p, m)) in pairs.iter().enumerate().skip(i + 1) {
            let other = keys.get(&KeyTuple((*p, *m)));
            assert_eq!(
                other.breaker().unwrap().state(),
                BreakerState::Closed,
                "opening key {i} opened key {j}"
            );
        }
    }
    assert_eq!(keys.len(), pairs.len());
    assert_eq!(
        keys.get(&KeyTuple((&*String::from("openai"), "gpt-4o")))
            .breaker()
            .unwrap()
            .state(),
        BreakerState::Open,
        "equal values are one key, whatever owns them"
    );
}

/// A string key is found by its text among the entries named by their own text only: a string
/// whose text is another key's quoted name (`"a b"` against `a b`, `"42"` against `42`), or is
/// an integer's or a type's name, keeps its own state, in whichever order the keys come.
#[tokio::test(start_paused = true)]
async fn a_string_is_never_found_under_a_name_that_only_spells_it() {
    for reversed in [false, true] {
        let policy = Policy::builder()
            .breaker_per_key("key", 1, Duration::from_secs(30))
            .build()
            .unwrap();
        let mut texts = ["a b", "\"a b\"", "42", "\"42\"", "x", "eu"];
        if reversed {
            texts.reverse();
        }
        let failed: Result<(), TestError> = policy
            .run_keyed(texts[0], || async { Err(TestError::Busy) })
            .await;
        assert_eq!(failed, Err(TestError::Busy));
        let keys = policy.keys().unwrap();
        for text in &texts[1..] {
            let state = keys.get(*text).breaker().unwrap().state();
            assert_eq!(state, BreakerState::Closed, "{text:?} after {:?}", texts[0]);
        }
        for _ in 0..2 {
            let state = keys.get(&String::from(texts[0])).breaker().unwrap().state();
            assert_eq!(state, BreakerState::Open, "{:?} found again", texts[0]);
        }
        let integer = keys.get(&42u32).breaker().unwrap().state();
        assert_eq!(integer, BreakerState::Closed);
        let tenant = Tenant {
            id: 1,
            region: "eu",
        };
        assert_eq!(
            keys.get(&tenant).breaker().unwrap().state(),
            BreakerState::Closed
        );
        assert_eq!(
            keys.get(&'x').breaker().unwrap().state(),
            keys.get("x").breaker().unwrap().state()
        );
        assert_eq!(
            keys.len(),
            texts.len() + 2,
            "every text, 42 and the tenant: 'x' is \"x\""
        );
    }
}

/// An integer and the string that prints like it are two keys; integers of two types with one
/// value are one.
#[tokio::test(start_paused = true)]
async fn integers_and_strings_that_print_alike_are_two_keys() {
    let policy = Policy::builder()
        .breaker_per_key("user", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let failed: Result<(), TestError> = policy
        .run_keyed(&42u32, || async { Err(TestError::Busy) })
        .await;
    assert_eq!(failed, Err(TestError::Busy));
    let keys = policy.keys().unwrap();
    assert_eq!(keys.get(&42u32).breaker().unwrap().name(), "user=42");
    assert_eq!(
        keys.get(&42i64).breaker().unwrap().state(),
        BreakerState::Open
    );
    let text = keys.get("42");
    assert_eq!(text.breaker().unwrap().name(), r#"user="42""#);
    assert_eq!(text.breaker().unwrap().state(), BreakerState::Closed);
}

/// A tenant named by its region: two tenants of one region print alike.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Tenant {
    id: u64,
    region: &'static str,
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.region)
    }
}

/// Local state is found by the key's value, whatever it prints as; the name (what a store
/// and the metrics see) is what it prints, with no type path, so it is the same in every build.
#[tokio::test(start_paused = true)]
async fn unequal_keys_that_print_alike_keep_their_own_state_under_one_stable_name() {
    let policy = Policy::builder()
        .breaker_per_key("tenant", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let (first, second) = (
        Tenant {
            id: 1,
            region: "eu",
        },
        Tenant {
            id: 2,
            region: "eu",
        },
    );
    let failed: Result<(), TestError> = policy
        .run_keyed(&first, || async { Err(TestError::Busy) })
        .await;
    assert_eq!(failed, Err(TestError::Busy));
    let keys = policy.keys().unwrap();
    let (opened, other) = (keys.get(&first), keys.get(&second));
    assert_eq!(opened.breaker().unwrap().state(), BreakerState::Open);
    assert_eq!(
        other.breaker().unwrap().state(),
        BreakerState::Closed,
        "an unequal tenant that prints alike has a breaker of its own"
    );
    assert_eq!(opened.breaker().unwrap().name(), "tenant=eu");
    assert_eq!(other.breaker().unwrap().name(), "tenant=eu");
    assert_eq!(keys.len(), 2);
    let again = Tenant {
        id: 1,
        region: "eu",
    };
    assert_eq!(
        keys.get(&again).breaker().unwrap().state(),
        BreakerState::Open,
        "an equal value is the same key"
    );
}

/// Two types declared in two blocks of one function have one type name; they are two keys.
#[tokio::test(start_paused = true)]
async fn two_types_of_one_name_are_two_keys() {
    let policy = Policy::builder()
        .breaker_per_key("id", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    {
        #[derive(Clone, Hash, PartialEq, Eq)]
        struct Id(u32);
        impl std::fmt::Display for Id {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "id-{}", self.0)
            }
        }
        let failed: Result<(), TestError> = policy
            .run_keyed(&Id(7), || async { Err(TestError::Busy) })
            .await;
        assert_eq!(failed, Err(TestError::Busy));
        let keys = policy.keys().unwrap();
        assert_eq!(
            keys.get(&Id(7)).breaker().unwrap().state(),
            BreakerState::Open
        );
    }
    {
        #[derive(Clone, Hash, PartialEq, Eq)]
        struct Id(u32);
        impl std::fmt::Display for Id {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "id-{}", self.0)
            }
        }
        let keys = policy.keys().unwrap();
        let other = keys.get(&Id(7));
        assert_eq!(other.breaker().unwrap().state(), BreakerState::Closed);
        assert_eq!(other.breaker().unwrap().name(), "id=id-7");
    }
}
