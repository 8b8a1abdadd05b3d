//! The slot a shared gate's waiting room books alone, for its next waiter, while the store
//! is late: the store counts it from its booking (the simulator's seeds 4436, 60066 ...).

use super::*;

/// One instance of a shared 1/s gate that orders its waiters. A call at 0 takes the store's
/// slot; at 0.1 s the store is late, and the next call, left to the local gate, waits in its
/// room for the slot it booked there (at 1 s). The store answers in time again, and a call at
/// 0.3 s asks it. The store is down by 1 s, so the room's slot stands; the store, told
/// nothing of it (charged only once its waiter took it), had granted the same second, and
/// both started at 1 s.
#[tokio::test(start_paused = true)]
async fn the_slot_a_waiting_room_booked_alone_is_charged_to_the_store_from_its_booking() {
    let store = InMemory::new();
    let gate = Policy::builder()
        .name("room::alone")
        .rate(1, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(&store)
        .shared_timeout(MS(50))
        .build()
        .unwrap();
    let (starts, origin) = (Starts::default(), Instant::now());
    call(&gate, Priority::Default, &starts, "first", origin)
        .await
        .unwrap();
    let in_room = async {
        sleep_until(origin + MS(100)).await;
        store.set_slow(true);
        call(&gate, Priority::Default, &starts, "room", origin).await
    };
    let asks = async {
        sleep_until(origin + MS(200)).await;
        store.set_slow(false);
        sleep_until(origin + MS(300)).await;
        call(&gate, Priority::Default, &starts, "asks", origin).await
    };
    // Down when the room's slot comes: it stands (the local gate decides again).
    let down = async {
        sleep_until(origin + MS(900)).await;
        store.set_available(false);
    };
    let (in_room, asks, ()) = tokio::join!(in_room, asks, down);
    assert!(in_room.is_ok() && asks.is_ok());
    let all = starts.all();
    assert!(
        all.windows(2).all(|pair| pair[1] - pair[0] >= MS(1_000)),
        "one start a second on a 1/s gate: room {:?}, asks {:?}",
        starts.of("room"),
        starts.of("asks")
    );
}
