//! An input gate: the inputs of one parallel instance of an operator chain
//! (one channel per upstream instance), combined into one stream of
//! elements, as Flink's input gate does.
//!
//! * Records and dead letters pass through as they arrive, from any input.
//! * The watermark is the minimum over the inputs; it is emitted once every
//!   input has sent one, and again whenever that minimum advances.
//! * A checkpoint barrier is emitted once every input still running has
//!   delivered it. An input that has delivered it is not read until then
//!   (barrier alignment), so everything before the barrier, and nothing
//!   after it, has been emitted when the barrier is.
//! * The end is emitted once every input has ended.

use super::{CheckpointBarrier, StreamElement};
use crossbeam_channel::{Receiver, Select};

/// Combines the inputs of one parallel instance (see the module docs).
pub(crate) struct InputGate {
    inputs: Vec<Input>,
    /// The barrier being aligned, if any.
    aligning: Option<CheckpointBarrier>,
    /// The last watermark emitted.
    emitted_watermark: i64,
}

struct Input {
    receiver: Receiver<StreamElement>,
    watermark: i64,
    /// Delivered the barrier being aligned: not read until it is emitted.
    blocked: bool,
    ended: bool,
}

impl InputGate {
    /// A gate over `receivers`, one per upstream instance.
    pub(crate) fn new(receivers: Vec<Receiver<StreamElement>>) -> Self {
        InputGate {
            inputs: receivers
                .into_iter()
                .map(|receiver| Input {
                    receiver,
                    watermark: i64::MIN,
                    blocked: false,
                    ended: false,
                })
                .collect(),
            aligning: None,
            emitted_watermark: i64::MIN,
        }
    }

    /// The next element for the chain, blocking until there is one.
    /// `None`: an input went away without ending (its instance failed and
    /// has reported why), so this instance stops too.
    pub(crate) fn next(&mut self) -> Option<StreamElement> {
        if let [input] = self.inputs.as_slice() {
            // One input: nothing to combine.
            return input.receiver.recv().ok();
        }
        loop {
            let (index, element) = self.receive()?;
            if let Some(element) = self.combine(index, element) {
                return Some(element);
            }
        }
    }

    /// Receives from any input that may be read now.
    fn receive(&self) -> Option<(usize, StreamElement)> {
        let mut select = Select::new();
        let mut readable = Vec::with_capacity(self.inputs.len());
        for (index, input) in self.inputs.iter().enumerate() {
            if !input.blocked && !input.ended {
                select.recv(&input.receiver);
                readable.push(index);
            }
        }
        if readable.is_empty() {
            return None;
        }
        let operation = select.select();
        let index = readable[operation.index()];
        let element = operation.recv(&self.inputs[index].receiver).ok()?;
        Some((index, element))
    }

    /// What `element` from input `index` means for the combined stream.
    fn combine(&mut self, index: usize, element: StreamElement) -> Option<StreamElement> {
        match element {
            StreamElement::Records(_)
            | StreamElement::DeadLetters(_)
            | StreamElement::LatencyMarker(_) => Some(element),
            StreamElement::Watermark(watermark) => {
                self.inputs[index].watermark = watermark;
                self.advanced_watermark()
            }
            StreamElement::Barrier(barrier) => {
                self.inputs[index].blocked = true;
                self.aligning = Some(barrier);
                self.aligned_barrier()
            }
            StreamElement::End => {
                self.inputs[index].ended = true;
                // An ended input no longer holds back the watermark or a
                // barrier; the others may now be complete.
                self.inputs[index].watermark = i64::MAX;
                if self.inputs.iter().all(|input| input.ended) {
                    return Some(StreamElement::End);
                }
                self.aligned_barrier().or_else(|| self.advanced_watermark())
            }
        }
    }

    fn advanced_watermark(&mut self) -> Option<StreamElement> {
        let combined = self
            .inputs
            .iter()
            .map(|input| input.watermark)
            .min()
            .unwrap_or(i64::MIN);
        if combined > self.emitted_watermark {
            self.emitted_watermark = combined;
            return Some(StreamElement::Watermark(combined));
        }
        None
    }

    fn aligned_barrier(&mut self) -> Option<StreamElement> {
        let complete = self.inputs.iter().all(|input| input.blocked || input.ended);
        if !complete {
            return None;
        }
        let barrier = self.aligning.take()?;
        for input in &mut self.inputs {
            input.blocked = false;
        }
        Some(StreamElement::Barrier(barrier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;
    use crossbeam_channel::{Sender, unbounded};

    fn gate(inputs: usize) -> (InputGate, Vec<Sender<StreamElement>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..inputs).map(|_| unbounded()).unzip();
        (InputGate::new(receivers), senders)
    }

    fn barrier(id: u64) -> StreamElement {
        StreamElement::Barrier(CheckpointBarrier {
            id,
            timestamp_ms: 0,
        })
    }

    fn records(value: &'static str) -> StreamElement {
        let source = crate::record::SourcePosition {
            topic: "test".into(),
            partition: 0,
            offset: 0,
        };
        StreamElement::Records(vec![Record::from_value(value, source)])
    }

    #[test]
    fn the_watermark_is_the_minimum_over_the_inputs() {
        let (mut gate, inputs) = gate(2);
        inputs[0].send(StreamElement::Watermark(10)).unwrap();
        inputs[1].send(StreamElement::Watermark(5)).unwrap();
        inputs[1].send(StreamElement::Watermark(20)).unwrap();
        // Input 0 alone has a watermark: nothing yet; then min(10, 5) = 5,
        // then min(10, 20) = 10.
        assert_eq!(gate.next(), Some(StreamElement::Watermark(5)));
        assert_eq!(gate.next(), Some(StreamElement::Watermark(10)));
    }

    #[test]
    fn a_barrier_waits_for_every_input_and_holds_back_those_that_delivered_it() {
        let (mut gate, inputs) = gate(2);
        inputs[0].send(barrier(1)).unwrap();
        inputs[0].send(records("after barrier on 0")).unwrap();
        inputs[1].send(records("before barrier on 1")).unwrap();
        inputs[1].send(barrier(1)).unwrap();
        assert_eq!(gate.next(), Some(records("before barrier on 1")));
        assert_eq!(gate.next(), Some(barrier(1)));
        assert_eq!(gate.next(), Some(records("after barrier on 0")));
    }

    #[test]
    fn the_end_comes_once_every_input_has_ended_and_releases_what_it_held_back() {
        let (mut gate, inputs) = gate(2);
        inputs[0].send(StreamElement::Watermark(7)).unwrap();
        inputs[0].send(barrier(3)).unwrap();
        inputs[1].send(StreamElement::End).unwrap();
        inputs[0].send(StreamElement::End).unwrap();
        // Input 1 ended: the barrier is complete, then the watermark of the
        // remaining input counts alone.
        let mut seen = Vec::new();
        while let Some(element) = gate.next() {
            let end = element == StreamElement::End;
            seen.push(element);
            if end {
                break;
            }
        }
        assert!(seen.contains(&barrier(3)), "{seen:?}");
        assert!(seen.contains(&StreamElement::Watermark(7)), "{seen:?}");
        assert_eq!(seen.last(), Some(&StreamElement::End));
    }

    #[test]
    fn an_input_that_goes_away_without_ending_stops_the_gate() {
        let (mut gate, mut inputs) = gate(2);
        inputs[1].send(StreamElement::End).unwrap();
        inputs.remove(0);
        assert_eq!(gate.next(), None);
    }
}
