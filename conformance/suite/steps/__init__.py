"""The suite's shared steps: the wire (`wire`), queues and deliveries (`queues`), reply texts
(`replies`), publisher confirms (`confirms`), consumer timeouts (`timeouts`), and the
model-vs-broker machines' run loop, support, steps and consuming base (`machine_*`)."""
