//! TensorBoard event files in the run directory, so `tensorboard --logdir runs/` shows every
//! metric of every run as a scalar under its RAGEN/verl name (`train/{tag}/success`,
//! `actor/grad_norm`, ...), at step = iteration, as RAGEN's own runs log them through verl's
//! `Tracking` logger.
//!
//! Records are written with the `tfrecord` crate (its TFRecord framing, CRCs and TensorFlow
//! protobuf types): one `events.out.tfevents.<unix µs>.ragen-gym` file per training process,
//! starting with the `brain.Event:2` file-version event, then one `simple_value` scalar per
//! metric. The file is flushed and fsynced once per iteration. A resumed run first rewrites the
//! existing event files without the events past the checkpoint, so TensorBoard shows each step
//! once, as JSONL truncation does for `metrics.jsonl`.

use ragen_gym_starpo::{ReportError, Reporter, RunDir, TrainEvent};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use tfrecord::protobuf::Event;
use tfrecord::protobuf::event::What;
use tfrecord::{EventMeta, RecordIter, RecordReaderConfig, RecordWriter, Summary};

/// The first event of every file (TensorBoard reads this version of the format).
const FILE_VERSION: &str = "brain.Event:2";

/// A file whose `flush` also fsyncs it (called once per iteration).
struct Durable(BufWriter<File>);

impl Write for Durable {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.0.get_ref().sync_data()
    }
}

/// Writes the run's metrics as TensorBoard scalars.
pub struct TensorBoardReporter {
    dir: PathBuf,
    writer: Option<RecordWriter<Event, Durable>>,
}

/// Whether `path` is a TensorBoard event file.
pub fn is_event_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("tfevents") && !n.ends_with(".tmp"))
}

/// The event files of `dir`, in TensorBoard's reading order (by name, which starts with the
/// creation time).
pub fn event_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| is_event_file(p));
    files.sort();
    Ok(files)
}

/// Every event of one file, in order. A record cut short by a crash ends the file.
pub fn read_events(path: &Path) -> Result<Vec<Event>, ReportError> {
    let reader = BufReader::new(File::open(path)?);
    let mut events = Vec::new();
    for e in RecordIter::<Event, _>::from_reader(reader, RecordReaderConfig::default()) {
        match e {
            Ok(e) => events.push(e),
            Err(tfrecord::Error::UnexpectedEof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(events)
}

/// The scalar values of `events` as `(tag, step, value)`.
pub fn scalars(events: &[Event]) -> Vec<(String, i64, f32)> {
    use tfrecord::protobuf::summary::value::Value;
    let mut out = Vec::new();
    for e in events {
        if let Some(What::Summary(s)) = &e.what {
            for v in &s.value {
                if let Some(Value::SimpleValue(x)) = v.value {
                    out.push((v.tag.clone(), e.step, x));
                }
            }
        }
    }
    out
}

impl TensorBoardReporter {
    /// A reporter writing into `run`'s directory.
    pub fn new(run: &RunDir) -> Self {
        Self {
            dir: run.root().to_path_buf(),
            writer: None,
        }
    }

    /// Start this process's event file.
    fn open(&mut self) -> Result<&mut RecordWriter<Event, Durable>, ReportError> {
        if self.writer.is_none() {
            let mut micros = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            // A new name, later than every file of an earlier process (TensorBoard reads them
            // in name order).
            let file = loop {
                let name = format!("events.out.tfevents.{micros:016}.ragen-gym");
                match File::create_new(self.dir.join(name)) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => micros += 1,
                    other => break other?,
                }
            };
            let mut w = RecordWriter::from_writer(Durable(BufWriter::new(file)))?;
            let mut version = EventMeta::with_step(0).build_empty();
            version.what = Some(What::FileVersion(FILE_VERSION.into()));
            w.send(version)?;
            w.flush()?;
            self.writer = Some(w);
        }
        Ok(self.writer.as_mut().expect("opened above"))
    }

    /// Rewrite every event file of the directory without the summaries of steps from `first` on.
    fn drop_steps_from(&self, first: i64) -> Result<(), ReportError> {
        for path in event_files(&self.dir)? {
            let events = read_events(&path)?;
            let tmp = path.with_extension("tmp");
            {
                let file = Durable(BufWriter::new(File::create(&tmp)?));
                let mut w = RecordWriter::<Event, _>::from_writer(file)?;
                for e in events {
                    let keep = !matches!(e.what, Some(What::Summary(_))) || e.step < first;
                    if keep {
                        w.send(e)?;
                    }
                }
                w.flush()?;
            }
            std::fs::rename(&tmp, &path)?;
        }
        Ok(())
    }
}

impl Reporter for TensorBoardReporter {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        match *event {
            TrainEvent::Started {
                first_logged,
                resumed,
                ..
            } => {
                if resumed {
                    self.drop_steps_from(i64::from(first_logged))?;
                }
                self.open()?;
            }
            TrainEvent::Metrics { iteration, metrics } => {
                let w = self.open()?;
                for (tag, v) in metrics {
                    if v.is_finite() {
                        let summary = Summary::from_scalar(tag, *v as f32)?;
                        w.send(
                            EventMeta::with_step(i64::from(iteration)).build_with_summary(summary),
                        )?;
                    }
                }
                w.flush()?;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_starpo::Metrics;

    fn started(r: &mut TensorBoardReporter, start_iteration: u32, resumed: bool) {
        r.report(&TrainEvent::Started {
            start_iteration,
            first_logged: start_iteration,
            total: 3,
            resumed,
            trainable_params: 0,
            batch: 1,
        })
        .unwrap();
    }

    fn metrics(r: &mut TensorBoardReporter, iteration: u32, success: f64) {
        let m = Metrics::from([
            ("train/Bandit/success".to_string(), success),
            ("actor/grad_norm".to_string(), 0.5 + f64::from(iteration)),
            ("critic/vf_loss".to_string(), f64::NAN),
        ]);
        r.report(&TrainEvent::Metrics {
            iteration,
            metrics: &m,
        })
        .unwrap();
    }

    fn all_scalars(dir: &Path) -> Vec<(String, i64, f32)> {
        event_files(dir)
            .unwrap()
            .iter()
            .flat_map(|f| scalars(&read_events(f).unwrap()))
            .collect()
    }

    #[test]
    fn event_files_hold_the_metrics_and_a_resume_replaces_later_steps() {
        let d = tempfile::tempdir().unwrap();
        let run = RunDir::create(d.path()).unwrap();
        let mut r = TensorBoardReporter::new(&run);
        started(&mut r, 1, false);
        for (it, s) in [(1, 0.25), (2, 0.5), (3, 0.75)] {
            metrics(&mut r, it, s);
        }
        drop(r);
        let files = event_files(d.path()).unwrap();
        assert_eq!(files.len(), 1);
        let events = read_events(&files[0]).unwrap();
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        // the NaN loss is skipped; values and steps are the metrics'
        assert_eq!(
            all_scalars(d.path()),
            vec![
                ("actor/grad_norm".to_string(), 1, 1.5),
                ("train/Bandit/success".to_string(), 1, 0.25),
                ("actor/grad_norm".to_string(), 2, 2.5),
                ("train/Bandit/success".to_string(), 2, 0.5),
                ("actor/grad_norm".to_string(), 3, 3.5),
                ("train/Bandit/success".to_string(), 3, 0.75),
            ]
        );
        // a record cut short by a crash ends its file
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&files[0])
            .unwrap();
        f.write_all(&[7, 0, 0]).unwrap();
        drop(f);
        // resume from the checkpoint of iteration 1: steps 2 and 3 go, step 2 is logged again
        let mut r = TensorBoardReporter::new(&run);
        started(&mut r, 2, true);
        metrics(&mut r, 2, 1.0);
        drop(r);
        assert_eq!(event_files(d.path()).unwrap().len(), 2);
        assert_eq!(
            all_scalars(d.path()),
            vec![
                ("actor/grad_norm".to_string(), 1, 1.5),
                ("train/Bandit/success".to_string(), 1, 0.25),
                ("actor/grad_norm".to_string(), 2, 2.5),
                ("train/Bandit/success".to_string(), 2, 1.0),
            ]
        );
    }
}
