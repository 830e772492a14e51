// Small Scala streaming queries whose state PySpark cannot write: case classes under
// flatMapGroupsWithState state format 1, Encoders.kryo state, a typed Aggregator.
// Compiled and run by tests/support/scala_queries.py with the Scala compiler and spark-submit
// that pyspark ships.
package statequeries

import java.sql.Timestamp

import org.apache.spark.sql.{Encoder, Encoders, SparkSession}
import org.apache.spark.sql.expressions.Aggregator
import org.apache.spark.sql.streaming.{GroupState, GroupStateTimeout, OutputMode, Trigger}

case class Reading(sensor: Int, ts: Timestamp, celsius: Double, label: String)

// state format 1 keeps these fields as the top-level value columns, then timeoutTimestamp
case class SensorState(readings: Seq[Double], label: Option[String], count: Long, lastSeen: Timestamp,
                       peak: Option[Double], alarm: Boolean)

case class Emitted(sensor: Int, count: Long)

// kept as one Kryo blob
class Tally(var total: Double, var labels: List[String]) extends Serializable

case class Mean(sum: Double, n: Long, last: Option[String])

object MeanAggregator extends Aggregator[Reading, Mean, Double] {
  def zero: Mean = Mean(0.0, 0L, None)
  def reduce(b: Mean, r: Reading): Mean = Mean(b.sum + r.celsius, b.n + 1, Option(r.label).orElse(b.last))
  def merge(a: Mean, b: Mean): Mean = Mean(a.sum + b.sum, a.n + b.n, b.last.orElse(a.last))
  def finish(b: Mean): Double = if (b.n == 0) 0.0 else b.sum / b.n
  def bufferEncoder: Encoder[Mean] = Encoders.product[Mean]
  def outputEncoder: Encoder[Double] = Encoders.scalaDouble
}

object StateQueries {
  // the timeout fires 8 s of event time after a sensor's newest reading
  def track(sensor: Int, rows: Iterator[Reading], state: GroupState[SensorState]): Iterator[Emitted] = {
    if (state.hasTimedOut) {
      val done = state.get
      state.remove()
      Iterator(Emitted(sensor, done.count))
    } else {
      val seen = rows.toSeq.sortBy(_.ts.getTime)
      val old = state.getOption.getOrElse(SensorState(Seq.empty, None, 0L, new Timestamp(0L), None, alarm = false))
      val readings = (old.readings ++ seen.map(_.celsius)).takeRight(4)
      val finite = seen.map(_.celsius).filterNot(_.isNaN)
      val peak = (old.peak.toSeq ++ finite).reduceOption((a, b) => math.max(a, b))
      val label = seen.flatMap(r => Option(r.label)).lastOption.orElse(old.label)
      val last = seen.last.ts
      val next = SensorState(readings, label, old.count + seen.size, last, peak, old.alarm || peak.exists(_ > 25.0))
      state.update(next)
      state.setTimeoutTimestamp(last.getTime + 8000L)
      Iterator.empty
    }
  }

  def tally(sensor: Int, rows: Iterator[Reading], state: GroupState[Tally]): Emitted = {
    val seen = rows.toSeq
    val t = state.getOption.getOrElse(new Tally(0.0, Nil))
    t.total += seen.map(_.celsius).filterNot(_.isNaN).sum
    t.labels = (t.labels ++ seen.flatMap(r => Option(r.label))).takeRight(3)
    state.update(t)
    Emitted(sensor, seen.size.toLong)
  }

  // args: one group of four per query (name, input, checkpoint, its confs as k=v joined by ';'): the
  // queries run one after another in one JVM, each in a session of its own with its confs
  def main(args: Array[String]): Unit = {
    val base = SparkSession.builder().getOrCreate()
    args.grouped(4).foreach { case Array(name, input, checkpoint, confs) =>
      val spark = base.newSession()
      confs.split(";").filter(_.nonEmpty).foreach { kv =>
        val Array(k, v) = kv.split("=", 2)
        spark.conf.set(k, v)
      }
      run(spark, name, input, checkpoint)
    }
    base.stop()
  }

  def run(spark: SparkSession, name: String, input: String, checkpoint: String): Unit = {
    import spark.implicits._
    val readings = spark.readStream.schema("sensor INT, ts TIMESTAMP, celsius DOUBLE, label STRING")
      .option("maxFilesPerTrigger", 1).option("allowNonNumericNumbers", "true").json(input).as[Reading]
    val (out, mode) = name match {
      case "fmgws_v1" =>
        (readings.withWatermark("ts", "3 seconds").groupByKey(_.sensor)
          .flatMapGroupsWithState(OutputMode.Append, GroupStateTimeout.EventTimeTimeout)(track).toDF(), "append")
      case "mgws_kryo" =>
        implicit val tallyEncoder: Encoder[Tally] = Encoders.kryo[Tally]
        (readings.groupByKey(_.sensor).mapGroupsWithState(GroupStateTimeout.NoTimeout)(tally).toDF(), "update")
      case "aggregator" =>
        (readings.groupByKey(_.sensor).agg(MeanAggregator.toColumn.name("mean")).toDF(), "update")
    }
    out.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
      .trigger(Trigger.AvailableNow()).start().awaitTermination()
  }
}
