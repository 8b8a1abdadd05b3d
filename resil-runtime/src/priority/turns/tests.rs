use super::*;

fn of(class: Priority) -> Place {
    Place::new(class, 0)
}

#[test]
fn serves_the_most_urgent_first_and_in_arrival_order_within_a_class() {
    let mut turns = Turns::default();
    let batch = turns.join(of(Priority::Batch));
    let default = turns.join(of(Priority::Default));
    let critical = turns.join(of(Priority::Critical));
    let second_critical = turns.join(of(Priority::Critical));
    for expected in [critical, second_critical, default, batch] {
        assert_eq!(turns.next(), Some(expected));
        assert!(!turns.serve(expected));
    }
    assert!(turns.is_empty());
}

#[test]
fn a_class_passed_over_aging_passes_times_is_served_next() {
    let mut turns = Turns::default();
    let batch = turns.join(of(Priority::Batch));
    let mut served = 0;
    loop {
        let critical = turns.join(of(Priority::Critical));
        let next = turns.next().unwrap();
        let promoted = turns.serve(next);
        assert_eq!(promoted, next == batch);
        if next == batch {
            break;
        }
        assert_eq!(next, critical);
        served += 1;
    }
    assert_eq!(served, Priority::AGING_PASSES);
}

#[test]
fn a_waiter_that_leaves_leaves_no_trace() {
    let mut turns = Turns::default();
    let first = turns.join(of(Priority::Batch));
    let second = turns.join(of(Priority::Batch));
    assert!(turns.leave(first));
    assert_eq!(turns.next(), Some(second));
    assert!(!turns.leave(first));
    assert_eq!(turns.ahead_of(of(Priority::Batch)), 1);
    assert_eq!(turns.ahead_of(of(Priority::Critical)), 0);
}

fn in_lane(lane: u64) -> Place {
    Place::new(Priority::Default, lane)
}

#[test]
fn lanes_of_a_class_are_served_in_turn() {
    let mut turns = Turns::new(100);
    let heavy: Vec<u64> = (0..4).map(|_| turns.join(in_lane(1))).collect();
    let light: Vec<u64> = (0..2).map(|_| turns.join(in_lane(2))).collect();
    let order = [heavy[0], light[0], heavy[1], light[1], heavy[2], heavy[3]];
    for expected in order {
        assert_eq!(turns.next(), Some(expected));
        turns.serve(expected);
    }
    assert!(turns.is_empty());
}

#[test]
fn a_newcomer_counts_one_of_each_lane_per_round_before_it() {
    let mut turns = Turns::new(100);
    for _ in 0..10 {
        turns.join(in_lane(1));
    }
    turns.join(in_lane(2));
    // Lane 1's next, lane 2's first, then its own turn.
    assert_eq!(turns.ahead_of(in_lane(3)), 2);
    // Lane 2 holds one: its second waiter waits for two rounds of lane 1.
    assert_eq!(turns.ahead_of(in_lane(2)), 3);
    assert_eq!(turns.ahead_of(in_lane(1)), 11);
    assert_eq!(turns.ahead_of(of(Priority::Critical)), 0);
    // Aging serves a batch call once eight more urgent ones went first.
    assert_eq!(turns.ahead_of(of(Priority::Batch)), 8);
}

#[test]
fn values_past_the_bound_share_the_overflow_lane_which_takes_its_turn() {
    let mut turns = Turns::new(2);
    let first = turns.join(in_lane(1));
    let second = turns.join(in_lane(1));
    let third = turns.join(in_lane(2));
    let fourth = turns.join(in_lane(3));
    let fifth = turns.join(in_lane(4));
    assert_eq!(turns.classes[1].lanes(), 3);
    for expected in [first, third, fourth, second, fifth] {
        assert_eq!(turns.next(), Some(expected));
        turns.serve(expected);
    }
    assert!(turns.is_empty());
}

#[test]
fn a_policy_that_is_not_fair_keeps_one_lane_whatever_the_values() {
    let mut turns = Turns::default();
    let first = turns.join(in_lane(1));
    let second = turns.join(in_lane(2));
    let third = turns.join(in_lane(1));
    for expected in [first, second, third] {
        assert_eq!(turns.next(), Some(expected));
        turns.serve(expected);
    }
}

#[test]
fn the_count_ahead_reads_the_lanes_lengths() {
    let mut turns = Turns::new(100);
    for (lane, waiters) in [(1, 5), (2, 1), (3, 3), (4, 2)] {
        for _ in 0..waiters {
            turns.join(in_lane(lane));
        }
    }
    // A newcomer of lane 3 waits for its lane's three, up to three of each other, and
    // one more of lane 1, served before lane 3 in this round.
    assert_eq!(turns.ahead_of(in_lane(3)), 3 + 3 + 1 + 2 + 1);
    assert_eq!(turns.ahead_of(in_lane(9)), 4);
    assert_eq!(turns.ahead_of(in_lane(1)), 11);
}

#[test]
fn lanes_that_leave_in_any_order_leave_the_rotation_as_it_was() {
    let mut turns = Turns::new(1_000);
    let ids: Vec<u64> = (0..100).map(|lane| turns.join(in_lane(lane))).collect();
    // Every other lane leaves, then comes back at the back.
    for id in ids.iter().skip(1).step_by(2) {
        assert!(turns.leave(*id));
    }
    let back: Vec<u64> = (1..100)
        .step_by(2)
        .map(|lane| turns.join(in_lane(lane)))
        .collect();
    let stayed = ids.iter().step_by(2);
    for expected in stayed.chain(back.iter()) {
        assert_eq!(turns.next(), Some(*expected));
        turns.serve(*expected);
    }
    assert!(turns.is_empty());
    assert_eq!(turns.classes[1].lanes(), 0);
}

#[test]
fn a_next_that_steps_aside_lets_the_other_classes_be_served_until_it_comes_back() {
    let mut turns = Turns::default();
    let batch = turns.join(of(Priority::Batch));
    let default = turns.join(of(Priority::Default));
    let later = turns.join(of(Priority::Default));
    turns.passed[2] = Priority::AGING_PASSES;
    assert_eq!(turns.next(), Some(batch));
    turns.step_aside(batch);
    assert_eq!(turns.next(), Some(default));
    turns.serve(default);
    assert_eq!(turns.next(), Some(later));
    turns.come_back(batch);
    assert_eq!(turns.next(), Some(batch));
    turns.serve(batch);
    assert_eq!(turns.next(), Some(later));
}

#[test]
fn a_waiter_aside_stays_next_while_no_other_class_waits() {
    let mut turns = Turns::default();
    let batch = turns.join(of(Priority::Batch));
    let second = turns.join(of(Priority::Batch));
    turns.step_aside(batch);
    assert_eq!(turns.next(), Some(batch));
    let critical = turns.join(of(Priority::Critical));
    assert_eq!(turns.next(), Some(critical));
    assert!(turns.leave(batch));
    assert!(!turns.is_aside(batch));
    turns.serve(critical);
    assert_eq!(turns.next(), Some(second));
}

#[test]
fn a_lane_left_empty_is_forgotten() {
    let mut turns = Turns::new(100);
    let gone = turns.join(in_lane(7));
    let stays = turns.join(in_lane(8));
    assert!(turns.leave(gone));
    assert_eq!(turns.classes[1].lanes(), 1);
    assert_eq!(turns.next(), Some(stays));
}

/// Serves `turns` to the end: the waiters in the order served.
fn served_all(turns: &mut Turns) -> Vec<u64> {
    std::iter::from_fn(|| {
        let next = turns.next()?;
        turns.serve(next);
        Some(next)
    })
    .collect()
}

#[test]
fn weighed_lanes_take_turns_by_the_units_they_were_served() {
    let mut turns = Turns::weighed(100);
    let heavy: Vec<u64> = (0..3)
        .map(|_| turns.join_costing(in_lane(1), 1000))
        .collect();
    let light: Vec<u64> = (0..5)
        .map(|_| turns.join_costing(in_lane(2), 200))
        .collect();
    // One heavy waiter, then the light lane's 1 000 units, then the heavy lane's.
    let mut order = vec![heavy[0]];
    order.extend(&light);
    order.extend(&heavy[1..]);
    assert_eq!(served_all(&mut turns), order);
    assert!(turns.is_empty());
}

#[test]
fn a_weighed_lane_made_later_banks_nothing() {
    let mut turns = Turns::weighed(100);
    let heavy: Vec<u64> = (0..6)
        .map(|_| turns.join_costing(in_lane(1), 1000))
        .collect();
    for expected in &heavy[..3] {
        assert_eq!(turns.next(), Some(*expected));
        turns.serve(*expected);
    }
    // The light lane starts where the heavy one's last finished, not at nothing: the two
    // alternate, the heavy lane first on the tie.
    let light: Vec<u64> = (0..3)
        .map(|_| turns.join_costing(in_lane(2), 1000))
        .collect();
    let order = [heavy[3], light[0], heavy[4], light[1], heavy[5], light[2]];
    assert_eq!(served_all(&mut turns), order);
}

#[test]
fn a_weighed_lanes_first_waiter_that_leaves_gives_its_tag_to_the_next() {
    let mut turns = Turns::weighed(100);
    let first = turns.join_costing(in_lane(1), 1000);
    let second = turns.join_costing(in_lane(1), 1000);
    let light = turns.join_costing(in_lane(2), 100);
    assert!(turns.leave(first));
    assert_eq!(served_all(&mut turns), [second, light]);
}

#[test]
fn a_newcomer_to_weighed_lanes_counts_at_least_those_served_before_it() {
    let mut turns = Turns::weighed(100);
    for _ in 0..10 {
        turns.join_costing(in_lane(1), 1000);
    }
    turns.join_costing(in_lane(2), 100);
    // A new lane comes after the two lanes' first waiters, of its tag and made before.
    assert_eq!(turns.ahead_of(in_lane(3)), 2);
    // Lane 2's own waiter; lane 1's first, served before it on the tie, is left out (at
    // least, so that nobody is refused for a wait it may not have).
    assert_eq!(turns.ahead_of(in_lane(2)), 1);
    assert_eq!(turns.ahead_of(in_lane(1)), 10);
}
