// Package admintest provides test doubles for code that uses pkg/admin: a
// Fake Controller, and Start and StartTLS, which serve an admin.Server on a
// loopback port for the duration of a test. Fake is safe for concurrent use.
package admintest
