"""The agent on every host: renews its certificates long before they expire and reports what it did."""
