package cidata

import (
	"bytes"
	"testing"
)

func TestASeedCarriesTheUserDataUnderTheLabelCloudInitLooksFor(t *testing.T) {
	userData := []byte("#cloud-config\nruncmd: [kubeadm join --token abcdef.0123456789abcdef]\n")
	image, err := NoCloud(userData, MetaData("workers-a1", "rack1-u12"))
	if err != nil {
		t.Fatal(err)
	}
	// The label is space padded on the disc, as genisoimage writes it,
	// not NUL padded.
	const volumeID = 16*2048 + 40
	if got := image[volumeID : volumeID+32]; !bytes.Equal(got, []byte("cidata                          ")) {
		t.Fatalf("volume identifier %q", got)
	}
	label, files, err := Read(image)
	if err != nil {
		t.Fatal(err)
	}
	if label != Label || !bytes.Equal(files["user-data"], userData) || string(files["meta-data"]) != "instance-id: workers-a1\nlocal-hostname: rack1-u12\n" || len(files) != 2 {
		t.Fatalf("label %q, files %q", label, files)
	}
}
