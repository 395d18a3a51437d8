"""The kernel: records, tables, the machine base class and transitions. No I/O lives here."""
