"""What the tests share and are not tests themselves: the SparkSession, the streaming queries that write
checkpoints, Spark's built-in reader as an oracle, the resume oracle of rewrites, damage to files,
a filesystem that counts round trips, and scripts run in their own processes."""
