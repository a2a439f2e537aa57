"""The sans-IO protocol engine: everything about mplex that needs no I/O.

Bytes in, decisions and bytes to send out; time is passed in; nothing here imports
trio (a test checks).  The trio layer (``mplex._trio.driver`` and the modules it uses)
only moves bytes between the engine and the transport and wakes the tasks that wait.
"""
