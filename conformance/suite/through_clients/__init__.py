"""The suite through client libraries (`--client NAME`): the client-capable rule
tests, the model machines driven through a library's `ClientDriver`, and the reply codes a
library hides (`recorded_replies`)."""
