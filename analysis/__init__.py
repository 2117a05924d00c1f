"""Turn run folders (summary.json + TensorBoard events) into tables and plots."""
