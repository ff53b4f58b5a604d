#!/usr/bin/env bash
# Sets up Apache Flink for the Flink columns of the Nexmark table (bench/nexmark/flink_sql.py).
#
# Flink is a benchmark extra, never a dependency of weir or of its tests. This makes:
#   bench/.flink-venv/        a virtualenv with apache-flink (PyFlink; it bundles Flink's jars)
#   bench/.flink-venv/jars/   the jars PyFlink does not bundle, from Maven Central:
#     flink-sql-parquet       Flink SQL's Parquet format, of Flink's own version
#     hadoop-client-api,      Hadoop's shaded client: the Parquet format reads files through
#     hadoop-client-runtime   Hadoop's Configuration and input classes, which Flink does not ship
#     weir-flink-bench.jar    a metric reporter compiled here (needs javac): it keeps each
#                             operator's final record counters, so a run into Nexmark's
#                             blackhole sink can still say how many rows reached the sink
#   bench/.flink-venv/log4j-bench.properties   Flink's log to its file only (never stdout)
#
# Run from the repository root (again at any time: it skips what is there):  bash bench/nexmark/setup_flink.sh
# Needs python3 (3.9-3.12 for apache-flink 2.3.0), a JDK 17 (java and javac), curl.
set -euo pipefail

FLINK_VERSION=2.3.0
HADOOP_VERSION=3.3.6
MAVEN=https://repo1.maven.org/maven2

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/bench/.flink-venv
jars=$venv/jars

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "apache-flink==$FLINK_VERSION"

mkdir -p "$jars"
fetch() {  # group path, artifact, version
    local file=$2-$3.jar
    if [ ! -s "$jars/$file" ]; then
        curl -sSfL -o "$jars/$file.part" "$MAVEN/$1/$2/$3/$file"
        mv "$jars/$file.part" "$jars/$file"
    fi
}
fetch org/apache/flink flink-sql-parquet "$FLINK_VERSION"
fetch org/apache/hadoop hadoop-client-api "$HADOOP_VERSION"
fetch org/apache/hadoop hadoop-client-runtime "$HADOOP_VERSION"

# The reporter: Flink calls notifyOfRemovedMetric when a task's (or the job's) metric group
# closes, so the counter's value then is its final one. It keeps counters and the checkpoint
# gauges (numberOf...) by operator (or task, or job) and metric name, summed over subtasks.
site=$("$venv/bin/python" -c 'import os, pyflink; print(os.path.dirname(pyflink.__file__))')
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/src/weir/bench" "$build/classes/META-INF/services"
cat > "$build/src/weir/bench/FinalCountsReporter.java" <<'JAVA'
package weir.bench;

import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.LogicalScopeProvider;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/** Keeps the final value of every counter, and of the gauges named numberOf*, of this JVM. */
public class FinalCountsReporter implements MetricReporter, MetricReporterFactory {
    private static final Map<String, Long> FINAL = new ConcurrentHashMap<>();

    @Override
    public MetricReporter createMetricReporter(Properties properties) {
        return new FinalCountsReporter();
    }

    @Override
    public void open(MetricConfig config) {}

    @Override
    public void close() {}

    @Override
    public void notifyOfAddedMetric(Metric metric, String name, MetricGroup group) {}

    @Override
    public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {
        long value;
        if (metric instanceof Counter) {
            value = ((Counter) metric).getCount();
        } else if (metric instanceof Gauge && name.startsWith("numberOf")) {
            Object v = ((Gauge<?>) metric).getValue();
            if (!(v instanceof Number)) {
                return;
            }
            value = ((Number) v).longValue();
        } else {
            return;
        }
        Map<String, String> vars = group.getAllVariables();
        String scope;
        if (vars.containsKey("<operator_name>")) {
            scope = "operator\t" + vars.get("<operator_name>");
        } else if (vars.containsKey("<task_name>")) {
            scope = "task\t" + vars.get("<task_name>");
        } else {
            scope = "job\t" + vars.getOrDefault("<job_name>", "");
        }
        String logical = group instanceof LogicalScopeProvider
                ? ((LogicalScopeProvider) group).getLogicalScope(s -> s, '.')
                : "";
        FINAL.merge(scope + "\t" + logical + "\t" + name, value, Long::sum);
    }

    /** One line per metric: kind, name, logical scope, metric name, value (tab separated). */
    public static String dump() {
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, Long> e : new TreeMap<>(FINAL).entrySet()) {
            out.append(e.getKey()).append('\t').append(e.getValue()).append('\n');
        }
        return out.toString();
    }

    public static void reset() {
        FINAL.clear();
    }
}
JAVA
echo weir.bench.FinalCountsReporter \
    > "$build/classes/META-INF/services/org.apache.flink.metrics.reporter.MetricReporterFactory"
javac -nowarn --release 11 -cp "$site/lib/flink-dist-$FLINK_VERSION.jar" \
    -d "$build/classes" "$build/src/weir/bench/FinalCountsReporter.java"
jar cf "$jars/weir-flink-bench.jar" -C "$build/classes" .

# PyFlink's log4j-cli.properties sends Hadoop's INFO lines to the console, which is the
# gateway's stdout, where flink_sql.py prints its one JSON line: log everything to the file.
cat > "$venv/log4j-bench.properties" <<'LOG4J'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FileAppender
appender.file.name = FileAppender
appender.file.type = FILE
appender.file.append = false
appender.file.fileName = ${sys:log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
logger.hadoopnative.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoopnative.level = OFF
LOG4J

echo "Flink $FLINK_VERSION is set up in $venv (jars in $jars)."
echo "Run: $venv/bin/python -m bench.nexmark.flink_sql --data DIR --query q0 --parallelism 1"
