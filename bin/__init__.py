"""Entry points: parse flags and environment once, call one public function."""
