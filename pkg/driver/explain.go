package driver

// Facts explain reads of a spec without knowing its kind: where its content
// comes from in the repository, and whether it deletes what nothing
// manages below its path.

// SourcePath is the repository path of the File's content (its source,
// resolved from the manifest's directory); empty for inline content.
func (s *FileSpec) SourcePath() string { return s.sourcePath }

// SourcePath is the repository directory the Directory mirrors; empty
// when it mirrors nothing.
func (s *DirectorySpec) SourcePath() string { return s.sourcePath }

// Purges reports whether the Directory deletes the entries inside it that
// nothing manages (purge: true).
func (s *DirectorySpec) Purges() bool { return s.Purge }

// Absent reports a File declared ensure: absent.
func (s *FileSpec) Absent() bool { return s.Ensure.Absent() }

// Absent reports a Directory declared ensure: absent.
func (s *DirectorySpec) Absent() bool { return s.Ensure.Absent() }

// Absent reports a Symlink declared ensure: absent.
func (s *SymlinkSpec) Absent() bool { return s.Ensure.Absent() }
