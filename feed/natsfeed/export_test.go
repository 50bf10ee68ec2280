package natsfeed

// Exported for the external tests.
var (
	SubjectMatches = subjectMatches
	ValidSubject   = validSubject
)
