//! The hand-rolled all-reduce is correct: after a step every replica holds the same parameters,
//! equal to one model trained on the whole batch; star and ring give the same gradients.
//!
//! The whole-batch equivalence holds only where a replica's loss on its shard does not depend on
//! the other samples. BatchNorm in training mode normalizes with its shard's statistics, so k
//! shards of b samples are not one batch of k·b (the test below shows the gap is real). The
//! equivalence check therefore runs BN in eval mode (fixed running statistics: every sample is
//! processed independently) while still training BN's weight and bias.

use ddptop_handrolled::data::{self, Data};
use ddptop_handrolled::model::{self, ModelKind};
use ddptop_handrolled::reduce::{self, Reduce};
use ddptop_handrolled::replica::{Dispatch, Group};
use tch::{Device, Kind, Tensor};

const B: i64 = 8;

/// libtorch's default generator is global and these tests seed it: one test at a time.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SEEDED.lock().unwrap_or_else(|p| p.into_inner())
}

fn data_for(k: usize, seed: i64) -> (Tensor, Tensor) {
    let (images, labels) = data::synthetic(B * k as i64, seed);
    (data::resize(&images), labels)
}

/// Replica r's shard of the whole batch: samples r*B..(r+1)*B.
fn shards(x: &Tensor, y: &Tensor, k: usize) -> Vec<(Tensor, Tensor)> {
    (0..k as i64)
        .map(|r| (x.narrow(0, r * B, B), y.narrow(0, r * B, B)))
        .collect()
}

fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

fn group(k: usize, dispatch: Dispatch, reduce: Reduce) -> Group {
    // One intra-op thread, as torchrun gives each DDP worker: the 2-core CI machine is shared.
    tch::set_num_threads(1);
    Group::new(
        ModelKind::Tiny,
        &vec![Device::Cpu; k],
        7,
        0.1,
        dispatch,
        reduce,
    )
    .unwrap()
}

/// k replicas, `steps` steps on the same whole batch: (group, single model on the whole batch).
fn train_both(k: usize, dispatch: Dispatch, reduce: Reduce, bn_train: bool) -> (Group, Group) {
    let (x, y) = data_for(k, 3);
    let mut g = group(k, dispatch, reduce);
    let mut one = group(1, Dispatch::Single, Reduce::Star);
    assert_eq!(
        max_diff(&g.replicas[0].params, &one.replicas[0].params),
        0.0,
        "same seed, same initial weights"
    );
    for _ in 0..2 {
        g.step(&shards(&x, &y, k), bn_train).unwrap();
        one.step(&[(x.shallow_clone(), y.shallow_clone())], bn_train)
            .unwrap();
    }
    (g, one)
}

#[test]
fn every_switch_gives_replicas_equal_to_one_model_on_the_whole_batch() {
    let _one_at_a_time = serial();
    for k in [2, 3] {
        for dispatch in [Dispatch::Single, Dispatch::Threads] {
            for reduce in [Reduce::Star, Reduce::Ring] {
                let what = format!("k={k} {}+{}", dispatch.as_str(), reduce.as_str());
                let (g, one) = train_both(k, dispatch, reduce, false);
                let first = &g.replicas[0].params;
                for r in &g.replicas[1..] {
                    assert_eq!(max_diff(first, &r.params), 0.0, "{what}: replicas differ");
                }
                let d = max_diff(first, &one.replicas[0].params);
                assert!(d < 1e-5, "{what}: {d} from the whole-batch model");
                // The step changed the weights (a check that would pass on untrained weights
                // proves nothing).
                let init = group(1, Dispatch::Single, Reduce::Star);
                assert!(max_diff(first, &init.replicas[0].params) > 1e-4, "{what}");
            }
        }
    }
}

#[test]
fn batchnorm_in_training_mode_is_why_the_check_uses_eval_mode() {
    let _one_at_a_time = serial();
    let (g, one) = train_both(2, Dispatch::Single, Reduce::Star, true);
    assert_eq!(max_diff(&g.replicas[0].params, &g.replicas[1].params), 0.0);
    let d = max_diff(&g.replicas[0].params, &one.replicas[0].params);
    assert!(
        d > 1e-5,
        "shard statistics should differ from the whole batch's ({d})"
    );
}

#[test]
fn star_and_ring_give_the_same_mean() {
    let _one_at_a_time = serial();
    for k in 2..=5 {
        for n in [1, 7, 1000, 4099] {
            tch::manual_seed(k as i64 * 31 + n);
            let bufs: Vec<Tensor> = (0..k)
                .map(|_| Tensor::randn([n], (Kind::Float, Device::Cpu)))
                .collect();
            let want = Tensor::stack(&bufs, 0).mean_dim(0, false, Kind::Float);
            let run = |how| {
                let mut b: Vec<Tensor> = bufs.iter().map(|t| t.copy()).collect();
                reduce::all_reduce_mean(&mut b, how).unwrap();
                b
            };
            for (how, got) in [
                (Reduce::Star, run(Reduce::Star)),
                (Reduce::Ring, run(Reduce::Ring)),
            ] {
                for g in &got {
                    let d = (g - &want).abs().max().double_value(&[]);
                    assert!(d < 1e-6, "k={k} n={n} {}: {d}", how.as_str());
                }
            }
        }
    }
}

#[test]
fn star_and_ring_give_the_same_gradients_of_the_model() {
    let _one_at_a_time = serial();
    let (x, y) = data_for(3, 5);
    let grads = |reduce| {
        let mut g = group(3, Dispatch::Single, reduce);
        g.step(&shards(&x, &y, 3), true).unwrap();
        // After the step the parameters moved by -lr·grad, the same on every replica.
        g.replicas
            .iter()
            .map(|r| r.params.iter().map(|p| p.grad().copy()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let (star, ring) = (grads(Reduce::Star), grads(Reduce::Ring));
    for r in 0..3 {
        let d = max_diff(&star[r], &ring[r]);
        assert!(
            d < 1e-6,
            "replica {r}: star and ring gradients differ by {d}"
        );
        assert_eq!(max_diff(&ring[0], &ring[r]), 0.0);
    }
}

#[test]
fn resnet18_has_the_books_parameter_count_and_shape() {
    let _one_at_a_time = serial();
    let vs = tch::nn::VarStore::new(Device::Cpu);
    let net = model::build(ModelKind::Resnet18, &vs.root());
    assert_eq!(model::count_params(&vs), model::RESNET18_PARAMS);
    assert_eq!(model::count_params(&vs), 11_175_818);
    let x = Tensor::zeros([2, 1, 64, 64], (Kind::Float, Device::Cpu));
    let out = tch::no_grad(|| tch::nn::ModuleT::forward_t(&net, &x, false));
    assert_eq!(out.size(), [2, 10]);
}

#[test]
fn synthetic_data_is_the_python_workers_data() {
    let _one_at_a_time = serial();
    // Checksums printed by workers/ddptop_worker/data.py for synthetic_fashion_mnist(1000, 0),
    // rank 1's epoch-1 permutation of 500 samples, and resize() of the first 10 images.
    let (im, lab) = data::synthetic(1000, 0);
    let w = Tensor::arange(im.numel() as i64, (Kind::Int64, Device::Cpu)).remainder(9973);
    let im_sum = (im.to_kind(Kind::Int64).flatten(0, -1) * w).sum(Kind::Int64);
    assert_eq!(im_sum.int64_value(&[]), 473_007_076_251);
    let lab_sum = (&lab * Tensor::arange(1000, (Kind::Int64, Device::Cpu))).sum(Kind::Int64);
    assert_eq!(lab_sum.int64_value(&[]), 2_176_956);
    let d = Data::build(&im, &lab, String::new(), &[Device::Cpu, Device::Cpu], 10, 0).unwrap();
    let p = &d.permutations(1)[1];
    let p_sum = (p * Tensor::arange(500, (Kind::Int64, Device::Cpu))).sum(Kind::Int64);
    assert_eq!(p_sum.int64_value(&[]), 31_424_791);
    let x = data::resize(&im.narrow(0, 0, 10))
        .to_kind(Kind::Double)
        .sum(Kind::Double);
    assert!((x.double_value(&[]) - 20000.27596320631).abs() < 1e-3);
}
