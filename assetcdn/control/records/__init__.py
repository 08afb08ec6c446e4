"""What the control plane records about the requests it answers: the audit log of successful
mutations (`audit`), the request log of control's answers and the edges' delivery samples
(`request_log`), the middleware that writes both (`recording`), the client address they carry, read
from trusted forwarders only (`client_ip`), and the periodic pruning of every dated store (`retention`)."""
